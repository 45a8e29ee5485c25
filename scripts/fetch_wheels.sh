#!/usr/bin/env bash
# Downloads, on a machine with a package registry, the wheels a GPU host without them needs (the cuda
# extra's baselines and Hydra at the versions pyproject.toml pins), into .whl/ of this checkout (ignored
# by git), for hosts that cannot reach an index. scripts/device_env.sh installs them there:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
# TARGET_PYTHON (default 3.12) is the GPU host's Python. Extra "name==version" arguments add wheels.
# FlashInfer, the MLA baseline, one version at a time in .whl/ (the other's wheel is removed):
#   FLASHINFER=0.7.4 (default, the cuda extra's pin): its wheel (101 MB, more than a device call carries) goes to
#     .whl-full/ (ignored, never carried) and a slim repack into .whl/ (scripts/slim_flashinfer.py: 7.3 MB, MLA paged
#     decode on SM90 only; checked by scripts/check_slim_flashinfer.py), with what it imports that the lent machine
#     lacks (nvidia-ml-py, ninja) and without nvidia-cudnn-frontend (11.6 MB), which the slim package never imports.
#     FLASHINFER_AOT=DIR adds JIT modules built on a GPU host (their .so files) to it as AOT artifacts.
#   FLASHINFER=0.5.3: its wheel (7.0 MB) as before, with nvidia-cudnn-frontend.
# Usage from the repository root: [FLASHINFER=0.5.3] bash scripts/fetch_wheels.sh [name==version ...]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .whl
flashinfer=${FLASHINFER:-0.7.4}
case "$flashinfer" in
  0.7.4) skip="flashinfer-python nvidia-cudnn-frontend" ;;
  0.5.3) skip="flashinfer-python" ;;
  *) echo "FLASHINFER=$flashinfer: 0.7.4 (slim) or 0.5.3" >&2; exit 2 ;;
esac
# the versions pyproject.toml pins: the cuda extra and hydra-core (omegaconf: the release Hydra 1.3 takes), FlashInfer
# apart (below)
pins=$(SKIP="$skip" python3 -c 'import os, re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
skip = os.environ["SKIP"].split()
print(" ".join([d for d in p["optional-dependencies"]["cuda"] if re.split("[=<>!~ ;]", d)[0] not in skip]
               + [d for d in p["dependencies"] if d.startswith("hydra-core")]))')
rm -f .whl/flashinfer_python-*.whl
[ "$flashinfer" = 0.5.3 ] || rm -f .whl/nvidia_cudnn_frontend-*.whl
if [ "$flashinfer" = 0.7.4 ]; then
  mkdir -p .whl-full
  python3 -m pip download -q --no-deps --only-binary=:all: -d .whl-full flashinfer-python==0.7.4
  python3 scripts/slim_flashinfer.py .whl-full/flashinfer_python-0.7.4-py3-none-any.whl .whl \
    ${FLASHINFER_AOT:+--aot "$FLASHINFER_AOT"} >/dev/null
  pins="$pins nvidia-ml-py==13.615.71 ninja==1.13.2"
else
  pins="$pins flashinfer-python==$flashinfer"
fi
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  $pins 'omegaconf==2.3.0' "$@"
# MLflow's tracking client with its SQLite store (the main job's tracking on the device: scripts/gpu_check.sh), and
# what it needs that the lent machine's image lacks; at the versions this project's .venv resolves (mlflow-skinny, not
# the full mlflow: the UI's 12 MB are not needed there). TRACKING=0 leaves them out (22 MB).
if [ "${TRACKING:-1}" != 0 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    mlflow-skinny==3.17.2 mlflow-tracing==3.17.2 SQLAlchemy==2.1.9 alembic==1.20.1 Mako==1.4.3 greenlet==3.5.6 \
    pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 cachetools==7.3.3 \
    sqlparse==0.6.1 python-dotenv==1.2.4 importlib_metadata==9.1.0 fastapi==0.165.0 starlette==1.10.0 \
    opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2 \
    opentelemetry-semantic-conventions==0.66b2 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 gitpython==3.2.1 \
    gitdb==4.0.12 smmap==5.0.3 databricks-sdk==0.167.0 google-auth==2.63.1 pyasn1==0.6.5 pyasn1_modules==0.4.2
fi
# antlr4-python3-runtime (Hydra's parser) has no wheel on PyPI: build one (pure Python)
ls .whl/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1 || \
  python3 -m pip wheel -q --no-deps -w .whl 'antlr4-python3-runtime==4.9.3'
du -sh .whl
