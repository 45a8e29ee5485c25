#!/usr/bin/env bash
# Downloads, on a machine with a package registry, the wheels a GPU host without them needs (the cuda
# extra's baselines and Hydra at the versions pyproject.toml pins), into .whl/ of this checkout (ignored
# by git), for hosts that cannot reach an index. scripts/device_env.sh installs them there:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
# TARGET_PYTHON (default 3.12) is the GPU host's Python. Extra "name==version" arguments add wheels.
# Usage from the repository root: bash scripts/fetch_wheels.sh [name==version ...]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .whl
# the versions pyproject.toml pins: the cuda extra and hydra-core (omegaconf: the release Hydra 1.3 takes)
pins=$(python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(" ".join(p["optional-dependencies"]["cuda"] + [d for d in p["dependencies"] if d.startswith("hydra-core")]))')
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  $pins 'omegaconf==2.3.0' "$@"
# antlr4-python3-runtime (Hydra's parser) has no wheel on PyPI: build one (pure Python)
ls .whl/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1 || \
  python3 -m pip wheel -q --no-deps -w .whl 'antlr4-python3-runtime==4.9.3'
du -sh .whl
