"""Side-by-side benchmarks of graphc against PyTorch (and JAX, torch.compile when present)."""
