"""Test utilities shared by backend test suites.

- `recording`: record a backend's file-system calls (a trace).
- `crashstates`: materialise the disk states a power loss may leave after
  any point of a trace (ALICE-style), plus trace assertions.
- `faultyops`: `FileOps` that skip fsync, fail chosen calls, or write short.
- `workload`: the seeded turns, worker session metadata and `rng` seeds the
  SQLite and PostgreSQL tests share with their worker processes.
- `worker`: the multi-process tests' worker program, run by backend
  (`python worker.py sqlite|postgres serve|pool|once|read ...`).
- `worker_client`: `Worker` (drives a `serve` worker in JSON lines),
  `spawned_workers` (behind each directory's `spawn_worker` fixture) and
  `worker_argv`.
- `pgserver`: the PostgreSQL test server (DSN, whether it is up, and
  `require_server`: skip only where no server is installed, else fail) and
  `throwaway_cluster`, a cluster of a test's own to crash.
- `skipguard`: a pytest plugin failing a run in which a `postgres` test
  skipped where PostgreSQL is required.
- `timing`: a pytest plugin summing test time per test directory (with
  `--durations`, as `make test` runs).
"""
