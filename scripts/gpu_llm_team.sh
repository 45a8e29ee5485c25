#!/usr/bin/env bash
# The device call (one, nvidia-h200; what it needs is carried, nothing is fetched there):
#   run(kind="nvidia-h200", timeout_s=600, carry=[".devtools", ".device-cache/llm-wheels"],
#       command="bash scripts/gpu_llm_team.sh $OUT")
# Before it, once, on a machine with PyPI: bash scripts/gpu_llm_team.sh --fetch-wheels
#
# An LLM team on the GPU (issue 42, item 3): `llm=litellm` against scripts/scripted_llm.py, a local server speaking
# the OpenAI chat protocol whose replies were written from the task brief alone (scripts/llm_turns/mla_decode/: a
# correct Triton MLA kernel, v1.py, checked and submitted; then an improvement, v2.py, checked and submitted), one
# run tracked in MLflow (a sqlite store) with its LLM traces (litellm autologging) and token ledger; afterwards the
# server's transcript, the ledger and the LLM journal are logged as artifacts of the run (folder llm/).
#
#   [HARDWARE=h200] [EVALS=4] [WORKLOADS="[uuid prefixes]"|all] [STOP_AFTER=480] [EXTRA="hydra overrides"] \
#     bash scripts/gpu_llm_team.sh OUT_DIR
#
# EVALS=4: the script's turns run two checks and two submits, each one evaluation (a turn ends at a successful
# submit, and no turn starts once the evaluations are spent: the run ends after the fourth reply). WORKLOADS: by
# default the smallest and largest workload of each batch group (6 of 47; all: every workload), which keeps the
# final table inside one call; workspace.inherit=none, so the brief shows the seed kernel and no champion is
# measured first. The run works in /tmp/evoteam-llm (ROOT); OUT_DIR gets console.log, transcript.jsonl and
# llm-team.tgz (the run folder, the MLflow store with its artifacts, the transcript): unpack it at the same ROOT
# (tar xzf llm-team.tgz -C /tmp/evoteam-llm) and `mlflow ui --backend-store-uri
# sqlite:////tmp/evoteam-llm/mlflow/evoteam-mlflow.db` finds the artifacts where they were logged.
# A dry run on a CPU: HARDWARE=cpu WORKLOADS="[00cb2bc2]" PYTHON=.venv/bin/python bash scripts/gpu_llm_team.sh OUT
set -uo pipefail
[ -n "${1:-}" ] && [ "$1" != --fetch-wheels ] && { mkdir -p "$1" && out=$(cd "$1" && pwd) || exit 1; }
cd "$(dirname "$0")/.." || exit 1
wheels=.device-cache/llm-wheels
# What the device image lacks for litellm and MLflow's tracking client (its package list: the device's KINDS.md),
# at the versions pyproject.toml pins and this checkout's tests ran with; Python 3.12, x86-64.
LLM_WHEELS="litellm==1.81.16 openai==3.60.0 httpx2==2.16.2 httpcore2==2.16.2 jiter==0.19.0 sniffio==1.3.1
fastuuid==0.14.0 python-dotenv==1.2.4 importlib-metadata==9.1.0 jsonschema==4.26.0
jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 pydantic==2.14.4 pydantic-core==2.50.5
annotated-types==0.8.0 typing-inspection==0.4.5 mlflow-skinny==3.17.2 mlflow-tracing==3.17.2 sqlalchemy==2.1.9
alembic==1.20.1 mako==1.4.3 sqlparse==0.6.1 cachetools==7.3.3 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2
opentelemetry-proto==1.45.2 opentelemetry-semantic-conventions==0.66b2 databricks-sdk==0.167.0 fastapi==0.165.0
starlette==1.10.0 uvicorn==0.55.0 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 truststore==0.10.5 cryptography==50.0.2
cffi==2.1.1 pycparser==3.12 google-auth==2.63.0 pyasn1==0.6.5 pyasn1-modules==0.4.2"
# The rest of what this run needs there: Hydra and the MLA baseline, FlashInfer as scripts/fetch_wheels.sh put it into
# .whl/ (the slim 0.7.4 with nvidia-ml-py and ninja, or 0.5.3: one source for the baseline every GPU script measures)
RUN_WHEELS="hydra-core==1.3.8 omegaconf==2.3.0 apache-tvm-ffi==0.1.15.post2"

if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p "$wheels"
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$wheels" $LLM_WHEELS $RUN_WHEELS || exit 1
  ls .whl/flashinfer_python-*.whl >/dev/null 2>&1 || { echo "no FlashInfer in .whl/: run bash scripts/fetch_wheels.sh first" >&2; exit 1; }
  cp .whl/flashinfer_python-*.whl "$wheels"/
  for extra in nvidia_ml_py ninja nvidia_cudnn_frontend; do cp .whl/$extra-*.whl "$wheels"/ 2>/dev/null || true; done
  # antlr4-python3-runtime (Hydra's parser) has no wheel on PyPI: build one (pure Python), as fetch_wheels.sh does
  ls "$wheels"/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1 || \
    python3 -m pip wheel -q --no-deps -w "$wheels" 'antlr4-python3-runtime==4.9.3' || exit 1
  du -sh "$wheels"
  exit 0
fi

[ -n "${out:-}" ] || { echo "usage: bash scripts/gpu_llm_team.sh OUT_DIR | --fetch-wheels" >&2; exit 2; }
PY=${PYTHON:-python3}
hardware=${HARDWARE:-h200}
evals=${EVALS:-4}
workloads=${WORKLOADS:-"[00cb2bc2,53a7dfec,a128f96f,84221f45,45be562f,5bef8d88]"}
[ "$workloads" = all ] && workloads="[]"
read -r -a extra <<< "${EXTRA:-}"
root=${ROOT:-/tmp/evoteam-llm}
rm -rf "$root" && mkdir -p "$root/cache" "$root/mlflow"
. scripts/device_env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
needed=(hydra litellm mlflow sqlalchemy alembic)
[ "$hardware" = cpu ] || needed+=(flashinfer)  # the MLA baseline on a GPU
# Installed or not, asked of the import system without importing them: importing the five took 5 s of CPU on a
# 2-core VM, 0.01 s this way (the run imports them next anyway).
if ! "$PY" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))" \
    "${needed[@]}" 2>/dev/null; then
  ls "$wheels"/*.whl >/dev/null 2>&1 || { echo "${needed[*]}: not all installed, and there is no $wheels/*.whl: run bash scripts/gpu_llm_team.sh --fetch-wheels where PyPI answers, and carry $wheels" >&2; exit 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
use_bwrap || exit 1
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=$root/cache SCRIPTED_LLM_KEY=unused MLFLOW_DISABLE_TELEMETRY=true

# The scripted model server, on a free port of this machine.
"$PY" scripts/scripted_llm.py --port 0 --port-file "$root/port" --turns mla_decode \
  --transcript "$root/transcript.jsonl" > "$root/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -s "$root/port" ] && break; sleep 0.2; done
[ -s "$root/port" ] || { echo "the scripted LLM server did not start:" >&2; cat "$root/server.log" >&2; exit 1; }
port=$(cat "$root/port")
cat "$root/server.log"

cmd=("$PY" -m evoteam hardware="$hardware" task=mla_decode "task.workloads=$workloads" team=single llm=litellm
     llm.model=openai/scripted "llm.api_base=http://127.0.0.1:$port/v1" llm.api_key_env=SCRIPTED_LLM_KEY
     budget.max_evaluations="$evals" tracking=mlflow "tracking.tracking_uri=sqlite:///$root/mlflow/evoteam-mlflow.db"
     tracking.experiment=llm-team workspace.inherit=none seed=1 run_dir="$root/run" "${extra[@]}")
echo "=== ${cmd[*]}" | tee "$out/console.log"
timeout -s INT -k 60 "${STOP_AFTER:-480}" "${cmd[@]}" 2>&1 | tee -a "$out/console.log" | grep -v "^  \["
rc=${PIPESTATUS[0]}
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
tail -1 "$root/server.log" | tee -a "$out/console.log"

echo "=== the run's token ledger against the server's usage; the transcript into the run's MLflow artifacts" | tee -a "$out/console.log"
"$PY" scripts/scripted_llm.py --log-run "$root/run" --transcript "$root/transcript.jsonl" 2>&1 | tee -a "$out/console.log"
ledger_rc=${PIPESTATUS[0]}
cp "$root/transcript.jsonl" "$out/transcript.jsonl"
pack_runs "$out/llm-team.tgz" "$root" run mlflow transcript.jsonl server.log
case $rc in
  0) echo "=== the run finished (ledger check exit $ledger_rc); OUT_DIR: console.log, transcript.jsonl, llm-team.tgz" ;;
  124|130) echo "=== the run was stopped after ${STOP_AFTER:-480} s (its state is in llm-team.tgz)" ;;
  *) echo "=== the run failed (exit $rc)" ;;
esac
exit 0
