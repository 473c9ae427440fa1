"""turnkeep-sqlite: the SQLite backend (work in progress)."""
