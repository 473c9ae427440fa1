# Every target is one command; `make help` lists them.
UV := ./scripts/uv
SYNC := $(UV) sync --all-packages --locked --quiet

.PHONY: help install demo test test-fast lint typecheck bench bench-all bench-full bench-docs soak mutate test-postgres docs site screenshots

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

install: ## Install every workspace member and the dev tools into .venv
	$(SYNC)

demo: ## The main job: an example agent on the default store, crash and resume
	$(SYNC) && $(UV) run --no-sync python scripts/demo.py

# The edit-test loop's tests: core and the agent loop, the memory backend's
# conformance, and one store-and-load smoke test each of JSONL and SQLite.
# `make test` (what CI runs) is the only complete run.
FAST_TESTS := tests/core tests/loop tests/conformance/test_memory.py \
	tests/plugins/jsonl/test_conformance.py::TestJsonlBackend::test_a_conversation_round_trips \
	tests/plugins/sqlite/test_conformance.py::TestSqliteBackend::test_a_conversation_round_trips

test: ## The whole suite, what CI runs; prints the slowest tests and test groups
	$(SYNC) && $(UV) run --no-sync pytest -n auto --durations=25

test-fast: ## The edit-test loop: core, loop, memory conformance, a JSONL and a SQLite smoke; stops at the first failure
	$(SYNC) && $(UV) run --no-sync pytest -n auto -x -m "not crash and not slow" $(FAST_TESTS)

lint: ## ruff check and format check
	$(SYNC) && $(UV) run --no-sync ruff check . && $(UV) run --no-sync ruff format --check .

typecheck: ## pyright (strict) over every member, tests and benchmarks
	$(SYNC) && $(UV) run --no-sync pyright

bench: ## Quick benchmarks (under a minute): the user's path with the peers, the backends, the curves; JSON and plots in benchmarks/results/
	$(SYNC) --group bench && $(UV) run --no-sync python -m benchmarks

bench-all: ## Every benchmark module (PostgreSQL, contention, the service, ...); some take minutes
	$(SYNC) --group bench && $(UV) run --no-sync python -m benchmarks --all

bench-full: ## Every benchmark module at full size (the loop at T = 1,000 turns, larger sessions)
	$(SYNC) --group bench && BENCH_FULL=1 BENCH_LOOP_TURNS=1000 $(UV) run --no-sync python -m benchmarks --all

# The plots the documentation site shows: a full run of the user's path and
# the scaling curves, written where docs/benchmarks.md finds them. Run it on
# a quiet machine (see `uptime`) and commit docs/benchmarks/.
bench-docs: ## A full run of bench_loop, bench_stream, bench_open, bench_pgfleet, bench_scaling and bench_long into docs/benchmarks/ (commit the result)
	$(SYNC) --group bench && BENCH_FULL=1 BENCH_LOOP_TURNS=1000 BENCH_OUT=docs/benchmarks \
		$(UV) run --no-sync python -m benchmarks loop stream open pgfleet scaling long

soak: ## Long randomised reliability runs (prints their seeds)
	$(SYNC) && $(UV) run --no-sync pytest -m soak -p no:cacheprovider --soak

# Mutation testing (cosmic-ray) of the JSONL writer, claim and scan, the SQLite
# and PostgreSQL writes, the write-behind, the turn gate and the service's
# guard: a seeded sample of mutants per area, each against the tests that own
# it. Slow (tens of seconds a mutant), so never part of `make test`. Pass
# options with MUTATE_ARGS, e.g. MUTATE_ARGS="jsonl --sample 0" for every
# JSONL mutant.
mutate: ## Mutation testing of the durability-critical modules (slow; not in make test): kill ratios and survivors
	$(SYNC) --group mutate && $(UV) run --no-sync python scripts/mutate.py $(MUTATE_ARGS)

test-postgres: ## Only the PostgreSQL tests
	$(SYNC) && $(UV) run --no-sync pytest -m postgres

screenshots: ## Refresh docs/images/serve-*.png from the web page's browser test (Chromium)
	$(SYNC) && TURNKEEP_SCREENSHOTS=$(CURDIR)/docs/images $(UV) run --no-sync pytest tests/serve/test_browser.py -p no:cacheprovider -q

docs: ## Regenerate docs/hooks.md from the hook specs
	$(SYNC) && $(UV) run --no-sync python -m turnkeep._hookdocs > docs/hooks.md

site: docs ## The documentation site (mkdocs-material, strict: any warning fails) into site/
	NO_MKDOCS_2_WARNING=1 $(UV) run --no-sync mkdocs build --strict --site-dir site
