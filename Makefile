# The two set-up commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,examples]'
	touch $(STAMP)

# Start gpuplaned in the foreground (embedded SQLite, local node); Ctrl-C stops it cleanly.
run: $(STAMP)
	$(BIN)/gpuplaned $(ARGS)

# Every test.
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/daemon_bench.py

clean:
	rm -rf $(VENV) build *.egg-info
