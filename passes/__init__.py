"""IR-to-IR passes: autodiff, optimizer updates, simplification and the pass manager."""
