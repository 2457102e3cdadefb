# Entry points. Each target bootstraps .venv with the pinned dependencies when missing: `make demo` installs only
# what it runs (the runtime and the embedded backend: moto's DynamoDB and SNS), the other targets add the rest
# (test tools, CDK) on top (issue #49 item 7: a cold `make demo` installs 160 MB, not 745 MB). --no-compile: the
# demo compiles the few modules it imports when it runs, not every module of moto and botocore at install time.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

# The venv is made without pip (ensurepip alone takes ~10 s) and the demo's packages installed by the host's pip
# (`--python`, pip 22.3+); a host without one falls back to the venv's own pip.
PIP_FLAGS := --quiet --disable-pip-version-check
$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv --without-pip $(VENV)
	$(PY) -m pip --python $(BIN)/python install $(PIP_FLAGS) --no-compile -e '.[embedded]' 2>/dev/null \
		|| { $(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip --default-pip >/dev/null; \
		     $(BIN)/python -m pip install $(PIP_FLAGS) --no-compile -e '.[embedded]'; }
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml $(DEMO_STAMP)
	$(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip --default-pip >/dev/null
	$(BIN)/python -m pip install $(PIP_FLAGS) -e '.[dev,infra]'
	touch $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/gpuaudit demo

# Lint first (ruff, mypy), then the suite on every core (pytest-xdist; a file's tests stay on one worker, files
# handed out in collection order: the slowest first, tests/conftest.py SLOW_FIRST), with the ten slowest tests
# named. pytest exits 5 when it collected no test: a failure here too.
# Bytecode caches are written even where the environment turns them off (PYTHONDONTWRITEBYTECODE): without them
# every worker and every `python -m gpuaudit` the tests start compiles every module and re-rewrites every test
# module's asserts (~8 s of CPU per pytest process). __pycache__ is git-ignored and kept out of the Lambda asset.
test: $(STAMP) lint
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=10; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi; exit $$rc

# The benchmarks the suite does not run (minutes each; figures printed, kept in docs/BENCHMARKS.md): one coverage
# audit of 1,000 generated nodes against a manual investigation, then the deployed steps' memory, time and calls
# at 2,000 nodes through wire parsing, then Verdict's DynamoDB calls and request units at 2,000 nodes, then what one
# hourly audit of 2,000 nodes scans, query by query, then RecordFailure for a deleted 10,000-node cluster, then a
# production day (24 hourly periods, 200 clusters and 10 fleets of 1,000 IDs, faults injected) on the synthesized stack.
bench: $(STAMP)
	$(BIN)/gpuaudit bench --nodes 1000
	$(BIN)/python tests/benchmarks/step_memory.py --nodes 2000
	$(BIN)/python tests/benchmarks/verdict_dynamodb.py --nodes 2000
	$(BIN)/python tests/benchmarks/hourly_scan.py --nodes 2000
	$(BIN)/python tests/benchmarks/record_failure.py --nodes 10000
	$(BIN)/python tests/benchmarks/production_day.py --json

# vulture: code nothing reads ([tool.vulture] in pyproject.toml says where it looks and what it leaves alone).
lint: $(STAMP)
	$(BIN)/ruff check functions tests infra app.py vulture_allowlist.py
	$(BIN)/mypy functions/gpuaudit functions/handlers infra
	$(BIN)/vulture

clean:
	rm -rf $(VENV)
