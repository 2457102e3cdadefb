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

# pytest exits 5 when it collected no test: that is a failure here too.
test: $(STAMP)
	$(BIN)/python -m pytest; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check functions tests infra
	$(BIN)/mypy functions/gpuaudit

clean:
	rm -rf $(VENV)
