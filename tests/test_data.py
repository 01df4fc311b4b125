"""graphc.utils.data: TensorDataset and DataLoader behave like torch.utils.data's."""

from __future__ import annotations

import numpy as np
import pytest

import graphc as gc
from graphc.utils.data import DataLoader, Dataset, TensorDataset


def _ds(n: int = 10) -> TensorDataset:
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return TensorDataset(x, y)


def test_tensor_dataset_items_and_len() -> None:
    ds = _ds()
    assert len(ds) == 10
    x, y = ds[4]
    np.testing.assert_array_equal(x, [12, 13, 14])
    assert y == 4
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(np.zeros((3, 2)), np.zeros(4))


def test_batches_in_order_last_partial_kept() -> None:
    dl = DataLoader(_ds(), batch_size=4)
    assert len(dl) == 3
    batches = list(dl)
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), np.arange(10))
    assert batches[0][0].dtype == np.float32 and batches[0][1].dtype == np.int64
    xb, yb = batches[2]  # unpacks like PyTorch's list batch
    assert xb.shape == (2, 3)


def test_drop_last() -> None:
    dl = DataLoader(_ds(), batch_size=4, drop_last=True)
    assert len(dl) == 2
    assert [len(y) for _, y in dl] == [4, 4]


def test_shuffle_is_a_permutation_and_seeded() -> None:
    gc.manual_seed(0)
    a = np.concatenate([y for _, y in DataLoader(_ds(), batch_size=3, shuffle=True)])
    b = np.concatenate([y for _, y in DataLoader(_ds(), batch_size=3, shuffle=True)])
    assert sorted(a) == list(range(10))
    assert not np.array_equal(a, np.arange(10)) or not np.array_equal(b, np.arange(10))
    gc.manual_seed(0)
    a2 = np.concatenate([y for _, y in DataLoader(_ds(), batch_size=3, shuffle=True)])
    np.testing.assert_array_equal(a, a2)  # gc.manual_seed fixes the order


def test_generator_drives_shuffling() -> None:
    ds = _ds(50)
    dl1 = DataLoader(ds, batch_size=7, shuffle=True, generator=np.random.default_rng(3))
    dl2 = DataLoader(ds, batch_size=7, shuffle=True, generator=np.random.default_rng(3))
    e1 = [np.concatenate([y for _, y in dl1]) for _ in range(2)]
    e2 = [np.concatenate([y for _, y in dl2]) for _ in range(2)]
    np.testing.assert_array_equal(e1[0], e2[0])
    np.testing.assert_array_equal(e1[1], e2[1])
    assert not np.array_equal(e1[0], e1[1])  # a new order every epoch
    x, y = next(iter(DataLoader(ds, batch_size=5, shuffle=True, generator=7)))
    np.testing.assert_array_equal(x[:, 0], y * 3)  # rows stay aligned


def test_default_batch_size_and_generic_dataset() -> None:
    class Squares(Dataset):
        def __len__(self) -> int:
            return 5

        def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
            return np.full(2, i, np.float32), i * i

    batches = list(DataLoader(Squares(), batch_size=2))
    assert len(batches) == 3
    np.testing.assert_array_equal(batches[1][0], [[2, 2], [3, 3]])
    np.testing.assert_array_equal(batches[1][1], [4, 9])
    assert len(list(DataLoader(_ds(3)))) == 3  # batch_size=1
    assert [int(y[0]) for _, y in DataLoader(_ds(3))] == [0, 1, 2]


def test_batches_feed_a_compiled_step() -> None:
    gc.manual_seed(0)
    model = gc.nn.Linear(3, 2)
    opt = gc.optim.SGD(model.parameters(), lr=0.01)
    lf = gc.nn.CrossEntropyLoss()

    @gc.compile
    def step(x: np.ndarray, y: np.ndarray) -> gc.Tensor:
        opt.zero_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x = np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True):
        assert np.isfinite(step(xb, yb).item())
    assert step.compile_count == 1  # the partial batch reuses the symbolic batch size


def test_utils_data_reachable_from_the_package() -> None:
    """``import graphc`` then ``graphc.utils.data`` (as ``torch.utils.data`` after ``import
    torch``), in a fresh interpreter."""
    import subprocess
    import sys

    code = "import graphc; print(graphc.utils.data.DataLoader.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "DataLoader", out.stderr


@pytest.mark.parametrize("workers", [1, 3])
def test_num_workers_gives_the_same_batches_in_order(workers: int) -> None:
    """Worker threads prefetch; the batches (shuffled by one generator seed, drop_last, a
    collate_fn) are the ones ``num_workers=0`` yields, in the same order."""
    x = np.arange(50, dtype=np.float32).reshape(25, 2)
    y = np.arange(25)
    ds = TensorDataset(gc.tensor(x), gc.tensor(y))
    kw = dict(batch_size=4, shuffle=True, drop_last=True)
    want = [[np.asarray(t) for t in b] for b in DataLoader(ds, generator=7, **kw)]
    seen: list[int] = []
    got = [[np.asarray(t) for t in b] for b in DataLoader(
        ds, generator=7, num_workers=workers, pin_memory=True, prefetch_factor=2,
        worker_init_fn=seen.append, **kw)]
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)
    assert seen and all(0 <= i < workers for i in seen)


def test_dataloader_worker_options_are_checked_as_torch() -> None:
    ds = TensorDataset(gc.tensor(np.zeros((4, 1), np.float32)))
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(ds, prefetch_factor=2)
    with pytest.raises(NotImplementedError, match="threads"):
        DataLoader(ds, num_workers=1, multiprocessing_context="spawn")
