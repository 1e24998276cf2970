"""What a run feeds the model: samples from files or generated (`inputs`), a loaded model with its
samples (`workload`), and the HDF5 activation store (`activations`)."""
