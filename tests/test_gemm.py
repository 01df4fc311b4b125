"""The packed GEMM (codegen/gemm.py) against numpy, in both of its orders.

``x @ W.T`` with few rows is computed as C^T = W x^T (W read in place, x^T packed, the tile
stored transposed); other shapes as C = A B with both operands packed. The cases below
cross the edges of both orders' tiles (M, N not multiples of MR / NR, K not a multiple of
the K block), symbolic batch sizes (one compile, many M), strided and transposed operands,
float32 and float64, with one and with two threads (the thread count is fixed when the
pool starts, so each count runs in its own process), blocked for this host's caches and for
tiny ones.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = r'''
import numpy as np, graphc as gc
rng = np.random.default_rng(0)
MS = (1, 5, 6, 7, 63, 64, 65, 200)
outs = []

def check(got, ref, k, what):
    got = got.numpy()
    tol = 2e-5 if got.dtype == np.float32 else 1e-13
    err = np.abs(got - ref).max() if got.size else 0.0
    bound = tol * (1 + np.sqrt(k) * np.abs(ref).max())
    assert got.shape == ref.shape and err <= bound, (what, got.shape, ref.shape, err, bound)
    outs.append(got.ravel())

for dt in (np.float32, np.float64):
    # x @ W.T (Linear forward), symbolic batch: one compile per (N, K), every M
    # (96, 300): 8 x 3 tiles with 512-bit vectors (six vectors), in both orders
    nks = ((256, 784), (10, 256), (17, 257), (65, 3), (1, 16), (64, 255), (256, 17),
           (96, 300), (1000, 64))
    for n, k in nks if dt == np.float32 else nks[:3] + nks[-2:]:
        Wn = rng.standard_normal((n, k)).astype(dt)
        W = gc.tensor(Wn)
        f = gc.compile(lambda x, W=W: x @ W.T)
        for m in MS + ((120,) if n == 1000 else ()):
            x = rng.standard_normal((m, k)).astype(dt)
            check(f(x), x.astype(np.float64) @ Wn.T.astype(np.float64), k, ("NT", m, n, k))
    # x @ W (input gradient layout)
    for n, k in ((256, 256), (10, 17), (65, 1)):
        Wn = rng.standard_normal((k, n)).astype(dt)
        W = gc.tensor(Wn)
        f = gc.compile(lambda x, W=W: x @ W)
        for m in (1, 7, 64, 65):
            x = rng.standard_normal((m, k)).astype(dt)
            check(f(x), x.astype(np.float64) @ Wn.astype(np.float64), k, ("NN", m, n, k))
    # A.T @ B (weight gradient layout), both operands inputs; A^T is read in place while
    # its k stride (M elements) is under a page, packed by rows of A from a page on
    # (M >= 1024 in float32, 512 in float64): M past the last full panel, several K blocks
    g = gc.compile(lambda a, b: a.T @ b)
    far = (300, 1030, 70) if dt == np.float32 else (150, 515, 33)
    for k, m, n in ((64, 256, 10), (7, 65, 64), (200, 63, 17), far):
        a = rng.standard_normal((k, m)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        check(g(a, b), a.T.astype(np.float64) @ b.astype(np.float64), k, ("TN", m, n, k))
    # ... and packed too where a K block's panel, read in place, would not fit L1d (KC 800
    # > 48 KiB of lines) and two or more column panels re-read it (N > NR); in place with
    # one panel. Either way the products and their order are those of a contiguous A^T:
    # the same bits as the NN product of the transposed copy
    if dt == np.float32:
        gnn = gc.compile(lambda a, b: a @ b)
        for k, m, n in ((1600, 389, 96), (1600, 389, 200), (1600, 70, 64)):
            a = rng.standard_normal((k, m)).astype(dt)
            b = rng.standard_normal((k, n)).astype(dt)
            got = g(a, b)
            check(got, a.T.astype(np.float64) @ b.astype(np.float64), k, ("TN", m, n, k))
            assert np.array_equal(got.numpy(), gnn(np.ascontiguousarray(a.T), b).numpy())
    # strided views: every other column of x, an offset slice, a transposed x
    Wn = rng.standard_normal((256, 392)).astype(dt)
    W = gc.tensor(Wn)
    W64 = Wn.astype(np.float64)
    h1 = gc.compile(lambda x: x[:, ::2] @ W.T)
    h2 = gc.compile(lambda x: x[:, 5:397] @ W.T)
    h3 = gc.compile(lambda xt: xt.T @ W.T, dynamic=False)
    for m in (6, 64, 65):
        x = rng.standard_normal((m, 784)).astype(dt)
        check(h1(x), x[:, ::2].astype(np.float64) @ W64.T, 392, ("stride", m))
        check(h2(x), x[:, 5:397].astype(np.float64) @ W64.T, 392, ("slice", m))
    xt = rng.standard_normal((392, 64)).astype(dt)
    check(h3(xt), xt.T.astype(np.float64) @ W64.T, 392, ("transposed x",))

    # the swapped order (M=64) and the plain one (M=65) add the same products in the same
    # order: the rows they share are bit-identical
    Wn = rng.standard_normal((256, 784)).astype(dt)
    W = gc.tensor(Wn)
    f = gc.compile(lambda x, W=W: x @ W.T)
    x = rng.standard_normal((65, 784)).astype(dt)
    assert np.array_equal(f(x[:64]).numpy(), f(x).numpy()[:64])
    f1 = gc.compile(lambda x, W=W: x @ W.T, dynamic=False)
    assert np.array_equal(f1(x[:64]).numpy(), f(x[:64]).numpy())
np.save(OUT, np.concatenate(outs))
'''


# the blocking follows the host's caches (``codegen.hostinfo``); tiny ones force what a
# large L1/L2 leaves out at these sizes: several K blocks per product (KC 128) and B packed
# in blocks of one panel of columns (NC = NR); "256-bit" forces the AVX2 tiles on any host
AVX2 = ("import graphc.runtime.cpu as _rt\n"
        "_rt.has_avx512 = lambda *a, **k: False\n")
TUNINGS = {"host": (None, ""), "small caches": ("l1d=8K,l2=64K", ""), "256-bit": (None, AVX2)}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Run the script with one and with two threads, for each tuning, all processes at once."""
    d = tmp_path_factory.mktemp("gemm")
    procs = {}
    for tuning, (caches, prelude) in TUNINGS.items():
        for t in (1, 2):
            env = {**os.environ, "GRAPHC_NUM_THREADS": str(t), "GRAPHC_CACHE": "0"}
            env.pop("GRAPHC_CPU_CACHES", None)
            if caches:
                env["GRAPHC_CPU_CACHES"] = caches
            out = d / f"gemm{t}_{len(procs)}.npy"
            code = f"OUT = {str(out)!r}\n" + prelude + SCRIPT
            procs[t, tuning] = (out, subprocess.Popen(
                [sys.executable, "-c", code], env=env, text=True, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE))
    for _, p in procs.values():
        _, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-4000:]
    return {k: np.load(out) for k, (out, _) in procs.items()}


@pytest.mark.parametrize("tuning", list(TUNINGS))
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_matches_numpy(results, threads, tuning):
    assert results[threads, tuning].size > 0  # the script asserts every case against numpy


@pytest.mark.parametrize("tuning", list(TUNINGS))
def test_two_threads_bit_identical(results, tuning):
    """Splitting C over two threads (rows or columns, each half choosing its own order)
    changes no result bit."""
    assert np.array_equal(results[1, tuning], results[2, tuning])


def test_tuning_changes_the_k_blocks(results):
    """The tiny caches' K blocks are shorter: different partial sums, so different bits
    somewhere (a check that ``GRAPHC_CPU_CACHES`` reached the code generator)."""
    assert not np.array_equal(results[1, "host"], results[1, "small caches"])
