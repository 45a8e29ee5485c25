#!/usr/bin/env bash
# The team's MLflow tracking server (see README.md beside this file): runs, metrics, team runs and
# LLM traces in a sqlite database, artifacts (kernels, tables, plots) served through the server
# from a folder, both under MLFLOW_DATA. Settings come from the environment:
#   MLFLOW_DATA=./mlflow-data  MLFLOW_HOST=0.0.0.0  MLFLOW_PORT=5000  MLFLOW_WORKERS=2
#   MLFLOW_ALLOWED_HOSTS=mlflow.example.org,10.0.0.5:5000   (needed when reached by a host name)
#   MLFLOW_BIN=mlflow                                        (default: .venv/bin/mlflow, else mlflow)
#   MLFLOW_BACKEND_STORE_URI=postgresql://user:pw@db:5432/mlflow   (default: the sqlite file; PostgreSQL is the
#                                                             store for many writers: a sweep's jobs on a cluster)
# Extra arguments go to `mlflow server` as they are.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
data=${MLFLOW_DATA:-./mlflow-data}
mkdir -p "$data/artifacts"
data=$(cd "$data" && pwd)
bin=${MLFLOW_BIN:-}
if [ -z "$bin" ]; then
  if [ -x "$here/../.venv/bin/mlflow" ]; then bin="$here/../.venv/bin/mlflow"; else bin=mlflow; fi
fi
export MLFLOW_DISABLE_TELEMETRY=true  # the server and the UI it serves send no usage data out
export LITELLM_LOCAL_MODEL_COST_MAP=True  # its AI gateway imports litellm, which would fetch a price list
# MLflow's server-side jobs (huey consumers and their periodic tasks: online scoring, trace roll-ups) are off: evoteam
# submits none, and their three processes per server took more CPU than the server itself. Set it to true to use them.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}
store=${MLFLOW_BACKEND_STORE_URI:-sqlite:///$data/mlflow.db}
args=(server --backend-store-uri "$store" --artifacts-destination "$data/artifacts"
      --host "${MLFLOW_HOST:-0.0.0.0}" --port "${MLFLOW_PORT:-5000}" --workers "${MLFLOW_WORKERS:-2}")
if [ -n "${MLFLOW_ALLOWED_HOSTS:-}" ]; then args+=(--allowed-hosts "$MLFLOW_ALLOWED_HOSTS"); fi
shown=$store; case $store in sqlite*) ;; *) shown="${store%%://*}://(credentials not shown)" ;; esac
echo "mlflow server: store $shown, artifacts $data/artifacts, http://${MLFLOW_HOST:-0.0.0.0}:${MLFLOW_PORT:-5000}" >&2
exec "$bin" "${args[@]}" "$@"
