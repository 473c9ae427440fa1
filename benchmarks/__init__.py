"""turnkeep's benchmarks: each measures against a raw baseline in the same run."""
