"""Switches of the CPU code generator that change the object code it emits, in a module of
their own so that the runtime can put them in the compile-cache key without importing the
code generator (``graphc.runtime.cpu``: a step found in the disk cache never lowers, and
skipping the import of the lowering modules is a good part of such a step's first call).

The lowering reads them at lowering time (``codegen.lower``, ``codegen.conv``), so a test or
a comparison may set them on this module."""

from __future__ import annotations

import os

# fuse loops of elementwise ops into loop groups (``codegen.loop``); off only to compare
LOOP_GROUPS = True
# GRAPHC_CONV_WINOGRAD=0 keeps every convolution on the implicit GEMM (to compare the two;
# read once, at import)
WINOGRAD = os.environ.get("GRAPHC_CONV_WINOGRAD", "1") != "0"
# GRAPHC_CONV_GEMM=0 keeps convolutions with many channels on small maps on the implicit
# GEMM instead of batched im2col products (``codegen.conv_gemm``; to compare)
CONV_GEMM = os.environ.get("GRAPHC_CONV_GEMM", "1") != "0"
# GRAPHC_CHANNEL_GROUPS=0 runs batch norm's reductions and passes as separate kernels
# instead of channel by channel (``codegen.channel_groups``; to compare)
CHANNEL_GROUPS = os.environ.get("GRAPHC_CHANNEL_GROUPS", "1") != "0"
# GRAPHC_WINOGRAD_WGRAD=0 keeps 3x3 stride-1 weight gradients on the direct kernels
# (``codegen.wino_wgrad``; to compare the two)
WINOGRAD_WGRAD = os.environ.get("GRAPHC_WINOGRAD_WGRAD", "1") != "0"
# GRAPHC_BF16_WINOGRAD=0 keeps bf16 3x3 stride-1 convolutions on the bf16 products where only
# AVX512-BF16 is there, instead of float32 Winograd between casts (``codegen.matmul.bf16_native``)
BF16_WINOGRAD = os.environ.get("GRAPHC_BF16_WINOGRAD", "1") != "0"
# GRAPHC_CONV_EPILOGUE=0 keeps the elementwise kernel that alone reads a convolution's result
# (bias, ReLU, eval BatchNorm, residual) a kernel of its own instead of the convolution's
# per-image epilogue (``codegen.planning._plan_conv_epilogues``; to compare)
CONV_EPILOGUE = os.environ.get("GRAPHC_CONV_EPILOGUE", "1") != "0"
# GRAPHC_GENERIC_KERNELS=0 compiles every channel group and loop group for its own sizes instead
# of one shape-generic kernel per computation (``codegen.generic``; to compare)
GENERIC_KERNELS = os.environ.get("GRAPHC_GENERIC_KERNELS", "1") != "0"

# GRAPHC_VECTOR_CHANNEL_GROUPS=0 leaves a channel group's runs as scalar loops for LLVM's O3
# loop vectoriser instead of writing them in vectors compiled at the tile level
# (``codegen.channel_groups``; to compare)
VECTOR_CHANNEL_GROUPS = os.environ.get("GRAPHC_VECTOR_CHANNEL_GROUPS", "1") != "0"

# GRAPHC_VECTOR_RUNS=0 leaves elementwise kernels and loop groups as scalar loops for LLVM's
# O3 loop vectoriser instead of writing their runs in vectors compiled at the tile level
# (``codegen.vector_runs``; to compare)
VECTOR_RUNS = os.environ.get("GRAPHC_VECTOR_RUNS", "1") != "0"

# GRAPHC_POOL_HOLD=0: the thread pool keeps splitting work over both threads after its worker
# was late (``codegen.parallel``: the late-worker hold; to compare)
POOL_HOLD = os.environ.get("GRAPHC_POOL_HOLD", "1") != "0"

__all__ = ["POOL_HOLD", "LOOP_GROUPS", "WINOGRAD", "CONV_GEMM", "CHANNEL_GROUPS", "WINOGRAD_WGRAD",
           "BF16_WINOGRAD", "CONV_EPILOGUE", "GENERIC_KERNELS", "VECTOR_CHANNEL_GROUPS",
           "VECTOR_RUNS"]
