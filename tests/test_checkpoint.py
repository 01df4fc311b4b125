"""Checkpoints: gc.save/gc.load format, atomic writes, and resuming training exactly."""

import json
import math
import os
from collections import Counter

import numpy as np
import pytest
from _parity import (
    assert_close,
    assert_same_state,
    batches,
    graphc_step,
    groups,
    make_models,
    torch_step,
)
from _torch import torch

import graphc as gc
import graphc.serialization as ser
from graphc import nn, optim
from graphc.optim import lr_scheduler as gls


def test_roundtrip_nested_structure(tmp_path):
    obj = {
        "state": {0: {"step": np.array(3.0, np.float32), "exp_avg": np.arange(6.0).reshape(2, 3)},
                  7: {"momentum_buffer": gc.tensor([1.0, -2.0])}},
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "amsgrad": False, "foreach": None,
                          "params": [0, 7], "name": "head"}],
        "floats": [float("nan"), float("inf"), -float("inf"), 0.1, -0.0],
        "ints": [0, -5, 2**62], "np_scalar": np.float64(2.5), "np_int": np.int64(-3),
        "milestones": Counter([5, 15, 15]), "empty": {}, "nested": [[[]], ()],
        "bools": np.array([True, False]), "i32": np.arange(4, dtype=np.int32),
    }
    gc.save(obj, tmp_path / "ck.npz")
    out = gc.load(tmp_path / "ck.npz")
    assert list(out["state"]) == [0, 7]
    assert out["state"][0]["step"].dtype == np.float32 and out["state"][0]["step"].shape == ()
    np.testing.assert_array_equal(out["state"][0]["exp_avg"], np.arange(6.0).reshape(2, 3))
    assert isinstance(out["state"][7]["momentum_buffer"], np.ndarray)
    np.testing.assert_array_equal(out["state"][7]["momentum_buffer"], [1.0, -2.0])
    assert out["param_groups"] == obj["param_groups"]
    assert isinstance(out["param_groups"][0]["betas"], tuple)
    assert math.isnan(out["floats"][0]) and out["floats"][1:4] == [math.inf, -math.inf, 0.1]
    assert math.copysign(1.0, out["floats"][4]) == -1.0
    assert out["ints"] == [0, -5, 2**62]
    assert out["np_scalar"] == 2.5 and isinstance(out["np_scalar"], np.float64)
    assert out["np_int"] == -3 and isinstance(out["np_int"], np.int64)
    assert out["milestones"] == Counter([5, 15, 15])
    assert isinstance(out["milestones"], Counter)
    assert out["empty"] == {} and out["nested"] == [[[]], ()]
    assert out["bools"].dtype == np.bool_ and out["i32"].dtype == np.int32


def test_format_is_plain_numpy(tmp_path):
    """Readable with numpy alone, no pickle: a JSON structure entry plus one entry per array."""
    path = tmp_path / "model.ckpt"
    gc.save({"w": np.ones((2, 2), np.float32), "epoch": 4}, path)
    assert path.exists() and not (tmp_path / "model.ckpt.npz").exists()
    with np.load(path, allow_pickle=False) as z:
        doc = json.loads(str(z["__graphc__"]))
        assert doc["format"] == "graphc.checkpoint" and doc["version"] == 1
        pairs = doc["root"]["$dict"]
        assert pairs[1] == ["epoch", 4]
        w = z[pairs[0][1]["$array"]]
        np.testing.assert_array_equal(w, np.ones((2, 2), np.float32))


def test_unsupported_objects_raise_type_error(tmp_path):
    with pytest.raises(TypeError, match=r"obj\['f'\].*function"):
        gc.save({"f": lambda: 0}, tmp_path / "x")
    with pytest.raises(TypeError, match="Python objects"):
        gc.save(np.array([object()]), tmp_path / "x")
    assert not os.listdir(tmp_path)


def test_not_a_checkpoint(tmp_path):
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not a graphc checkpoint"):
        gc.load(tmp_path / "plain.npz")


def test_failed_write_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "ck.npz"
    gc.save({"version": 1, "w": np.zeros(1000, np.float32)}, path)
    before = path.read_bytes()

    def broken_writer(f, arrays):
        f.write(b"PK\x03\x04 half an archive")
        raise OSError("disk full")

    monkeypatch.setattr(ser, "_write_archive", broken_writer)
    with pytest.raises(OSError, match="disk full"):
        gc.save({"version": 2, "w": np.ones(1000, np.float32)}, path)
    assert path.read_bytes() == before
    assert gc.load(path)["version"] == 1
    assert os.listdir(tmp_path) == ["ck.npz"]  # the temporary file was removed
    monkeypatch.undo()
    gc.save({"version": 2}, path)
    assert gc.load(path) == {"version": 2}


def test_interrupted_process_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    """KeyboardInterrupt in the middle of the write is handled like any other failure."""
    path = tmp_path / "ck"
    gc.save([1, 2, 3], path)

    def interrupted(f, arrays):
        np.savez(f, **arrays)
        raise KeyboardInterrupt

    monkeypatch.setattr(ser, "_write_archive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gc.save([4, 5, 6], path)
    assert gc.load(path) == [1, 2, 3]
    assert os.listdir(tmp_path) == ["ck"]


OPTIMIZERS = {
    "adam": lambda m: optim.Adam(groups(m, dict(lr=1e-2, weight_decay=0.1),
                                        dict(lr=3e-3)), amsgrad=True),
    "adamw": lambda m: optim.AdamW(groups(m, dict(lr=1e-2), dict(lr=3e-3, weight_decay=0.0))),
    "rmsprop": lambda m: optim.RMSprop(groups(m, dict(lr=3e-3), dict(lr=1e-3)), momentum=0.9,
                                       centered=True),
    "adagrad": lambda m: optim.Adagrad(groups(m, dict(lr=3e-2, lr_decay=0.01), dict(lr=1e-2))),
    "sgd": lambda m: optim.SGD(groups(m, dict(lr=1e-2), dict(lr=5e-3)), momentum=0.9,
                               nesterov=True),
}


def _schedule(opt):
    return gls.SequentialLR(opt, [gls.LinearLR(opt, 0.25, total_iters=4),
                                  gls.CosineAnnealingLR(opt, T_max=16)], milestones=[4])


@pytest.mark.parametrize("mode", ["eager", "compiled", "interp"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_save_load_continue_equals_uninterrupted(name, mode, tmp_path):
    data = batches(20)

    def fresh():
        _, gm = make_models()
        opt = OPTIMIZERS[name](gm)
        return gm, opt, _schedule(opt)

    # uninterrupted
    gm, opt, sched = fresh()
    step = graphc_step(gm, opt, mode)
    for x, y in data:
        step(x, y)
        sched.step()
    ref_params = gm.state_dict()
    ref_state = opt.state_dict()

    # interrupted at step 10
    gm, opt, sched = fresh()
    step = graphc_step(gm, opt, mode)
    for x, y in data[:10]:
        step(x, y)
        sched.step()
    gc.save({"model": gm.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "step": 10}, tmp_path / "ck.npz")
    del gm, opt, sched, step

    gm, opt, sched = fresh()
    ck = gc.load(tmp_path / "ck.npz")
    gm.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    assert ck["step"] == 10
    step = graphc_step(gm, opt, mode)
    for x, y in data[10:]:
        step(x, y)
        sched.step()
    if mode != "eager":
        assert step.compile_count == 1
    for k, v in gm.state_dict().items():
        np.testing.assert_array_equal(v, ref_params[k], err_msg=k)
    got = opt.state_dict()
    assert got["param_groups"] == ref_state["param_groups"]
    for i, st in ref_state["state"].items():
        assert list(got["state"][i]) == list(st)
        for k, v in st.items():
            np.testing.assert_array_equal(got["state"][i][k], v, err_msg=f"state[{i}][{k}]")


def _to_numpy_state_dict(sd):
    return {
        "state": {i: {k: (v.numpy() if isinstance(v, torch.Tensor) else v)
                      for k, v in st.items()} for i, st in sd["state"].items()},
        "param_groups": [dict(g) for g in sd["param_groups"]],
    }


TORCH_OPTIMIZERS = {
    "adam": (lambda ps: torch.optim.Adam(ps, amsgrad=True, weight_decay=0.05),
             lambda ps: optim.Adam(ps, amsgrad=True, weight_decay=0.05)),
    "adamw": (lambda ps: torch.optim.AdamW(ps), lambda ps: optim.AdamW(ps)),
    "rmsprop": (lambda ps: torch.optim.RMSprop(ps, momentum=0.5, centered=True),
                lambda ps: optim.RMSprop(ps, momentum=0.5, centered=True)),
    "adagrad": (lambda ps: torch.optim.Adagrad(ps, lr_decay=0.01),
                lambda ps: optim.Adagrad(ps, lr_decay=0.01)),
    "sgd": (lambda ps: torch.optim.SGD(ps, momentum=0.9), lambda ps: optim.SGD(ps, momentum=0.9)),
}


@pytest.mark.parametrize("mode", ["eager", "interp"])
@pytest.mark.parametrize("name", list(TORCH_OPTIMIZERS))
def test_resume_from_torch_state_dicts(name, mode, tmp_path):
    """Train 10 steps in PyTorch, move model + optimizer state to graphc (through a
    checkpoint file), continue both for 10 steps: graphc follows PyTorch's trajectory."""
    make_t, make_g = TORCH_OPTIMIZERS[name]
    g0, g1 = dict(lr=1e-2), dict(lr=4e-3)
    tm, _ = make_models()
    topt = make_t(groups(tm, g0, g1))
    tstep = torch_step(tm, topt)
    data = batches(20)
    for x, y in data[:10]:
        tstep(x, y)
    gc.save({"model": {k: v.detach().numpy() for k, v in tm.state_dict().items()},
             "optimizer": _to_numpy_state_dict(topt.state_dict())}, tmp_path / "torch.ckpt")

    gm = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    gopt = make_g(groups(gm, dict(lr=0.5), dict(lr=0.5)))
    ck = gc.load(tmp_path / "torch.ckpt")
    gm.load_state_dict(ck["model"])
    gopt.load_state_dict(ck["optimizer"])
    assert [g["lr"] for g in gopt.param_groups] == [1e-2, 4e-3]
    gstep = graphc_step(gm, gopt, mode)
    for x, y in data[10:]:
        tl = tstep(x, y)
        gl = gstep(x, y)
        assert_close(np.asarray(gl), tl.item(), "loss")
    assert_same_state(tm, gm, topt, gopt)
