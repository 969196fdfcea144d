"""Named like a model PyTorch's torchbench.yaml skips everywhere (skip.all): never loaded."""

raise AssertionError("a model on the references' skip list was imported")
