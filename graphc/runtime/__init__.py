"""What runs a compiled step: the executables (CPU, PTX, interpreter), their call wrappers and
guards, the compile cache, the thread pool and the backend registry.

Below the front end (``tensor``, ``nn``, ``optim``, ``trace``, ``api``), which traces and
compiles steps, and above ``graphc.codegen``, which turns a graph into object code or PTX text
without running anything. Submodules are imported on use; importing this package loads nothing.
"""
