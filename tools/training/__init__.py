"""The training step against PyTorch (gradients, MACs, checkpointing memory) and in
alternative forms (BatchNormalization)."""
