"""Sampling one token per row on the device: the sampler, its rows' parameters, the penalties
and the torch reference of the fused kernels (gpu_stage/kernels/sampling.py, truncation.py)."""
