# Two entry points (see README.md): `make run` sets up and runs the main job, `make test` the tests.
# Both create .venv on first use and reinstall only when pyproject.toml changes. `make run` installs what the main
# job needs ($(VENV)/.installed); `make test` adds the test tools on top ($(VENV)/.installed-dev: the dev extra,
# with Ray for executor=ray's tests, and flashinfer-bench's data model).
VENV   ?= .venv
PY     := $(VENV)/bin/python
# A CPU-only machine takes torch's CPU build; on a GPU host use the torch already there: make TORCH=torch
TORCH  ?= torch==2.13.0
# Extra pip arguments for torch, e.g. PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
PIP_ARGS ?=
# What installs everything but torch: uv, from PyPI (the dev install in a fresh clone on the 2-core CI machine:
# 46-49 s where pip alone took 101 s); INSTALLER=pip for pip alone, where pip's configuration names a private index
# (or tell uv: UV_INDEX_URL).
INSTALLER ?= uv
ARGS   ?=
ifeq ($(INSTALLER),uv)
INSTALL = $(VENV)/bin/uv pip install --python $(PY) -q --compile-bytecode
else
INSTALL = $(PY) -m pip install -q --disable-pip-version-check
endif

.PHONY: run test lint browser sandbox clis
# What the main job needs: torch, evoteam and its dependencies (no test tools, no Ray).
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || { echo "make: creating $(VENV)"; python3 -m venv $(VENV); }
	@echo "make: installing evoteam and what the main job needs ($(TORCH), hydra, mlflow, litellm, ...) into $(VENV) with $(INSTALLER): a minute on a first install"
	@# torch is chosen by pip, which reads this machine's pip configuration (its find-links or index: where a CPU
	@# build lies). With uv, pip only downloads the wheel (a venv that has torch already: pip keeps or upgrades it) and
	@# uv unpacks it with evoteam and the rest in one pass (a fresh clone on the 2-core CI machine: 31 s, where pip's
	@# install of torch, then uv's of the rest, took 40). uv keeps the torch it finds.
ifeq ($(INSTALLER),uv)
	@$(PY) -m pip install -q --disable-pip-version-check uv==0.13.9
	@rm -rf $(VENV)/torch-wheel
	@if $(PY) -c "import importlib.metadata as m; m.version('torch')" 2>/dev/null; \
	then $(PY) -m pip install -q --disable-pip-version-check $(PIP_ARGS) "$(TORCH)"; \
	else $(PY) -m pip download -q --disable-pip-version-check --no-deps -d $(VENV)/torch-wheel $(PIP_ARGS) "$(TORCH)"; fi
	@$(INSTALL) $$(ls $(VENV)/torch-wheel/*.whl 2>/dev/null) -e .
	@rm -rf $(VENV)/torch-wheel
else
	@$(PY) -m pip install -q --disable-pip-version-check $(PIP_ARGS) "$(TORCH)"
	@$(INSTALL) -e .
endif
	@touch $@
	@echo "make: $(VENV) is ready"

# The test tools on top (make test, make lint): the dev extra, then flashinfer-bench's data model.
$(VENV)/.installed-dev: $(VENV)/.installed
	@echo "make: installing the test tools (pytest, ruff, hadolint, Ray, flashinfer-bench's data model) into $(VENV)"
	@$(INSTALL) -e ".[dev]"
	@# flashinfer-bench's data model, to check that it reads our traces: its models' deps, then it alone
	@# (its kernels' deps are not needed); last and without deps, so the installer has no conflict to report
	@echo "make: installing flashinfer-bench 0.1.2 (its data model only, for the trace tests)"
	@$(INSTALL) "pydantic>=2" "docstring-parser>=0.16" "safetensors>=0.5"
	@$(INSTALL) --no-deps flashinfer-bench==0.1.2
	@touch $@
	@echo "make: $(VENV) is ready for the tests"

run: $(VENV)/.installed sandbox
	$(PY) -m evoteam $(ARGS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .

# The tests run in parallel (pytest-xdist): two workers a core, since a test waits on its subprocesses (runners,
# servers, clusters) much of the time; tests/conftest.py keeps the files with costly module fixtures whole on one
# worker. Fresh-clone .ci/run on the 2-core machine, 2026-12-06: 3 workers pytest 773 s; 4 workers 687 s and 770 s
# (the CPU 99-100% busy mid-run); 5 workers 794 s. This VM's speed varies from run to run by about 10%: 4 is at worst
# no slower than 3.
# TEST_WORKERS=0 runs them in this process, one after another. The slowest 30 are listed
# at the end: where the suite's time goes, in every CI log.
# Python keeps its bytecode (__pycache__, ignored by git) during the tests, even where the environment asks it not to
# (PYTHONDONTWRITEBYTECODE=1, as the development VM sets it): else every worker rewrites every test module and every
# process the tests start compiles the package afresh (collecting the suite: 8.9 CPU-s a worker without, 5.6 with).
# A candidate's sandbox is read-only and still writes none.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
test: lint sandbox
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=30 $(ARGS)

# bubblewrap, the sandbox every candidate runs in (evoteam/harness/sandbox.py): Debian's package, installed
# as root where it is missing; without it an evaluation refuses to run (or runs with executor.sandbox=weak).
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "make sandbox: bubblewrap is missing; install it (sudo apt-get install bubblewrap)"; fi; }

# Headless Chromium for the MLflow UI test (tests/test_mlflow_server.py skips without it): Debian's
# package, installed as root where it is missing; nothing downloads a browser build of its own.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  test "$$(id -u)" = 0 || { echo "make browser: run as root, or: sudo apt-get install chromium"; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@chromium --version 2>/dev/null | head -n 1

# The coding-agent CLIs the tests drive (pinned in tests/clis/package-lock.json; npm, Node 20).
clis:
	@command -v npm >/dev/null 2>&1 || { echo "make: npm is missing: apt-get install -y nodejs npm"; exit 1; }
	@echo "make: installing Claude Code and Codex CLIs (tests/clis, pinned) from npm"
	@npm ci --prefer-offline --prefix tests/clis --no-audit --no-fund --loglevel=error
