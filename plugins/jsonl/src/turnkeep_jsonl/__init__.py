"""turnkeep-jsonl: the file backend (work in progress)."""
