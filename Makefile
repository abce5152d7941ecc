# Two entry points for a fresh machine: `make demo` and `make test`. Both create .venv when
# missing and install the project with its dev, embedded and bench extras (the suite runs every
# benchmark's smoke mode, the store's peer included), every package at the version
# constraints.txt pins.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PINNED := -c constraints.txt

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(PINNED) -e '.[dev,embedded,bench]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/nodewright validate examples/nodepools/*.yaml
	@echo "--- one simulated Monday of three NodePools, every service its own process (about 2 minutes)"
	$(BIN)/nodewright run examples/scenarios/flagship-day.yaml --speed 720 --report .nodewright/report
	@echo "--- now drive a local cluster with kubectl: in one terminal"
	@echo "  $(BIN)/nodewright up"
	@echo "and in another"
	@echo "  export KUBECONFIG=.nodewright/kubeconfig PATH=$$PWD/$(BIN):\$$PATH"
	@echo "  kubectl apply -f examples/kubectl/"
	@echo "  kubectl get nodepools,nodeclaims,nodes"
	@echo "  kubectl patch nodepool general --type merge -p '{\"spec\":{\"limits\":{\"nodes\":\"1\"}}}'"
	@echo "  kubectl get events"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -n 3 --dist loadgroup tests

bench: $(STAMP)
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
	$(BIN)/python -m benchmarks.cluster_api
	$(BIN)/python -m benchmarks.projections
	$(BIN)/python -m benchmarks.aws
	$(BIN)/python -m benchmarks.whatif

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
