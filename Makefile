# Two entry points (see README.md): `make run` sets up and runs the main job, `make test` the tests.
# Both create .venv on first use and reinstall only when pyproject.toml changes.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# A CPU-only machine takes torch's CPU build; on a GPU host use the torch already there: make TORCH=torch
TORCH  ?= torch==2.13.0
# Extra pip arguments, e.g. PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
PIP_ARGS ?=
ARGS   ?=

.PHONY: run test lint
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q $(PIP_ARGS) "$(TORCH)" -e ".[dev]"
	# flashinfer-bench's data model, to check that it reads our traces (its kernels' deps are not needed)
	$(PY) -m pip install -q --no-deps flashinfer-bench==0.1.2
	$(PY) -m pip install -q "pydantic>=2" "docstring-parser>=0.16" "safetensors>=0.5"
	touch $@

run: $(VENV)/.installed
	$(PY) -m evoteam $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest $(ARGS)
