# Every target is one command; `make help` lists them.
UV := ./scripts/uv
SYNC := $(UV) sync --all-packages --locked --quiet

.PHONY: help install demo test test-fast lint typecheck bench soak test-postgres docs

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

install: ## Install every workspace member and the dev tools into .venv
	$(SYNC)

demo: ## The main job: an example agent on the default store, crash and resume
	$(SYNC) && $(UV) run --no-sync python scripts/demo.py

test: ## The whole test suite (PostgreSQL tests skip without a server)
	$(SYNC) && $(UV) run --no-sync pytest -n auto

test-fast: ## The edit-test loop: everything but crash, slow and soak tests, stop at the first failure
	$(SYNC) && $(UV) run --no-sync pytest -n auto -x -m "not crash and not slow"

lint: ## ruff check and format check
	$(SYNC) && $(UV) run --no-sync ruff check . && $(UV) run --no-sync ruff format --check .

typecheck: ## pyright (strict) over every member, tests and benchmarks
	$(SYNC) && $(UV) run --no-sync pyright

bench: ## Benchmarks: ratios against raw baselines (and peers) measured in the same run
	$(SYNC) --group bench && $(UV) run --no-sync python -m benchmarks

soak: ## Long randomised reliability runs (prints their seeds)
	$(SYNC) && $(UV) run --no-sync pytest -m soak -p no:cacheprovider --soak

test-postgres: ## Only the PostgreSQL tests
	$(SYNC) && $(UV) run --no-sync pytest -m postgres

docs: ## Regenerate docs/hooks.md from the hook specs
	$(SYNC) && $(UV) run --no-sync python -m turnkeep._hookdocs > docs/hooks.md
