"""CPU kernels the transformers backend installs: oneDNN linears, compiled layers and norms."""
