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

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest tests

bench: $(STAMP)
	$(BIN)/python benchmarks/budgets.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
