"""Host facts that tune generated code (codegen/hostinfo.py, codegen/cpu.has_avx512): cache
sizes from sysfs with fallbacks, the blocking derived from them, the compile-cache key, and
512-bit vectors decided by LLVM's features rather than by a list of CPU names."""

from __future__ import annotations

from pathlib import Path

import pytest
from graphc.codegen import gemm, hostinfo
from graphc.codegen.hostinfo import DEFAULT_CACHES, Caches


def _fake_sysfs(root: Path, entries: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_parse_size() -> None:
    assert hostinfo.parse_size("48K") == 48 << 10
    assert hostinfo.parse_size("2048K\n") == 2 << 20
    assert hostinfo.parse_size("2M") == 2 << 20
    assert hostinfo.parse_size("512 KiB") == 512 << 10
    assert hostinfo.parse_size("lots") is None


def test_sysfs_l1d_and_l2(tmp_path: Path) -> None:
    root = _fake_sysfs(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "64K"),
                                  (2, "Unified", "2048K"), (3, "Unified", "491520K")])
    assert hostinfo.read_sysfs(root) == Caches(48 << 10, 2 << 20, "sysfs")


@pytest.mark.parametrize("entries", [
    [],                                                 # no cache directory at all
    [(1, "Data", "32K")],                               # no L2 listed
    [(1, "Data", "0K"), (2, "Unified", "1024K")],       # a hypervisor's nonsense
    [(1, "Data", "32K"), (2, "Unified", "4096M")],
])
def test_sysfs_incomplete_or_insane_is_none(tmp_path: Path, entries: list) -> None:
    assert hostinfo.read_sysfs(_fake_sysfs(tmp_path / "c", entries)) is None


def test_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHC_CPU_CACHES", "l1d=8K,l2=64K")
    hostinfo.host_caches.cache_clear()
    try:
        assert hostinfo.host_caches() == Caches(8 << 10, 64 << 10, "env")
        monkeypatch.setenv("GRAPHC_CPU_CACHES", "l3=1M")
        hostinfo.host_caches.cache_clear()
        with pytest.raises(ValueError, match="GRAPHC_CPU_CACHES"):
            hostinfo.host_caches()
    finally:
        monkeypatch.delenv("GRAPHC_CPU_CACHES")
        hostinfo.host_caches.cache_clear()


def test_tuned_for_reaches_choose_tile() -> None:
    small = Caches(8 << 10, 64 << 10, "test")
    with hostinfo.tuned_for(small):
        t = gemm.choose_tile(1024, True)
    assert (t.l1d, t.l2) == (small.l1d, small.l2)
    host = hostinfo.host_caches()
    t = gemm.choose_tile(1024, True)
    assert (t.l1d, t.l2) == (host.l1d, host.l2)


def test_blocking_from_caches() -> None:
    spr = gemm.Tile(16, 6, 4, 48 << 10, 2 << 20)   # Sapphire Rapids: 48 KiB L1d, 2 MiB L2
    zen4 = gemm.Tile(16, 6, 4, 32 << 10, 1 << 20)
    assert spr.kc(4) == 1024 and zen4.kc(4) == 640
    assert spr.kc(8) == 512                          # float64: half the elements per line
    assert gemm.Tile(16, 6, 4, 8 << 10, 64 << 10).kc(4) == gemm.KC_MIN
    assert spr.l2_budget(4) * 4 == 512 << 10
    assert zen4.swap_max_bytes() == 256 << 10
    # the packed A^T of mlp_small's forward (64 x 784 floats) fits both: the swapped order
    assert 64 * 784 * 4 <= zen4.swap_max_bytes()


def test_workspace_covers_the_blocks() -> None:
    """The workspace bound holds for the run-time block sizes (``_kblocks``/``_nc_block``
    computed here the same way)."""
    for t in (gemm.Tile(16, 6, 4, 48 << 10, 2 << 20), gemm.Tile(16, 6, 4, 8 << 10, 64 << 10)):
        for m, n, k in ((256, 1024, 1024), (64, 784, 256), (7, 3000, 5000)):
            kcm = t.kc(4)
            nblk = max(1, -(-k // kcm))
            kc = -(-k // nblk)
            nc = max(1, t.l2_budget(4) // (kc * t.nr)) * t.nr
            np_ = -(-min(n, nc) // t.nr) * t.nr
            mp = -(-m // t.mr) * t.mr
            assert (np_ + mp) * kc * 4 + 128 <= int(gemm.workspace_bytes(m, n, k, t, 4))


def test_cache_key_covers_the_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphc.runtime import cache

    a = cache.key("graph", "target")
    monkeypatch.setattr(hostinfo, "host_caches", lambda: Caches(8 << 10, 64 << 10, "test"))
    b = cache.key("graph", "target")
    assert a != b


def test_default_caches_are_a_real_core() -> None:
    assert DEFAULT_CACHES.l1d == 32 << 10 and DEFAULT_CACHES.l2 == 1 << 20


@pytest.mark.parametrize("cpu, features, wide", [
    ("x86-64-v3", "", False), ("x86-64-v4", "", True), ("haswell", "", False),
    ("znver3", "", False), ("znver4", "", True), ("znver5", "", True),
    ("skylake-avx512", "", True), ("rocketlake", "", True), ("tigerlake", "", True),
    ("sapphirerapids", "", True), ("znver4", "-avx512f", False),
])
def test_has_avx512_asks_llvm(cpu: str, features: str, wide: bool) -> None:
    """Named CPUs (AOT targets) by their features, not by a list of names: rocketlake and
    tigerlake were missing from the old list, and a ``-avx512f`` override is honoured."""
    from graphc.codegen.cpu import has_avx512, host_target_machine, init_llvm

    init_llvm()
    assert has_avx512(host_target_machine(cpu, features), cpu) is wide


def test_describe_host_names_the_flags() -> None:
    line = hostinfo.describe_host()
    for flag in hostinfo.ISA_FLAGS:
        assert flag in line
    assert "L1d" in line and "L2" in line


def test_tuned_features_lift_llvms_256_bit_preference(monkeypatch):
    """AVX-512 hosts vectorise elementwise kernels 16 floats wide (LLVM's tuning for many of
    them prefers 8), unless GRAPHC_VECTOR_WIDTH=256 asks for LLVM's choice."""
    from graphc.codegen.llvm_objects import tuned_features

    monkeypatch.delenv("GRAPHC_VECTOR_WIDTH", raising=False)
    assert tuned_features("+avx2,+avx512f,+fma") == "+avx2,+avx512f,+fma,-prefer-256-bit"
    assert tuned_features("+avx2,-avx512f") == "+avx2,-avx512f"
    assert tuned_features("+avx512f,+prefer-256-bit") == "+avx512f,+prefer-256-bit"
    monkeypatch.setenv("GRAPHC_VECTOR_WIDTH", "256")
    assert tuned_features("+avx2,+avx512f") == "+avx2,+avx512f"
    monkeypatch.setenv("GRAPHC_VECTOR_WIDTH", "128")
    with pytest.raises(ValueError, match="GRAPHC_VECTOR_WIDTH"):
        tuned_features("+avx512f")


def test_elementwise_kernels_use_512_bit_vectors_where_they_exist(monkeypatch):
    import llvmlite.binding as llvm
    import numpy as np
    from graphc.codegen.cpu import init_llvm

    import graphc as gc

    init_llvm()
    if "+avx512f" not in llvm.get_host_cpu_features().flatten().split(","):
        pytest.skip("no AVX-512 on this host")
    monkeypatch.delenv("GRAPHC_VECTOR_WIDTH", raising=False)
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    f = gc.compile(lambda x: x.exp() * 2.0, dynamic=False)
    f(np.ones((64, 64), np.float32))
    asm = f.ir("asm")
    assert "zmm" in asm and "ymm" not in asm  # the exp loop: 16 lanes, no 8-lane remnants
