# Entry points. Each target bootstraps .venv with the pinned dependencies when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,infra]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuaudit demo

# Lint first (ruff, mypy), then the suite on every core (pytest-xdist; a file's tests stay on one worker), with
# the ten slowest tests named. pytest exits 5 when it collected no test: a failure here too.
test: $(STAMP) lint
	$(BIN)/python -m pytest -n auto --dist loadfile --durations=10; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check functions tests infra app.py
	$(BIN)/mypy functions/gpuaudit functions/handlers infra

clean:
	rm -rf $(VENV)
