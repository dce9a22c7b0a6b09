"""Loading a model: the packaged SmolLM2 wheel, folders in the store, the CPU or CUDA backend."""
