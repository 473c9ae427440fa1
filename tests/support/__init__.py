"""Test utilities shared by backend test suites.

- `crashstates`: record a backend's file-system calls and materialise the
  disk states a power loss may leave (ALICE-style), plus trace assertions.
- `faultyops`: `FileOps` that skip fsync, fail chosen calls, or write short.
"""
