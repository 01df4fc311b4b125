"""Lowering of optimized graphs to native code (llvmlite CPU backend, PTX, AOT)."""
