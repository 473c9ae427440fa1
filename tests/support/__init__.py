"""Test utilities shared by backend test suites.

- `recording`: record a backend's file-system calls (a trace).
- `crashstates`: materialise the disk states a power loss may leave after
  any point of a trace (ALICE-style), plus trace assertions.
- `faultyops`: `FileOps` that skip fsync, fail chosen calls, or write short.
"""
