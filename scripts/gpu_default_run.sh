#!/usr/bin/env bash
# `python -m evoteam` on its defaults (tracking aside) on one NVIDIA GPU, across calls shorter than the run: after
# SECONDS the run is stopped as by Ctrl-C (it keeps its state; a long evaluation keeps its finished pieces), its
# folder and the baseline cache are packed into OUT_DIR/run-TASK.tgz, and a later call given that archive resumes it.
# Usage from the repository root:
#   [RUN_IN=.device-cache/run-TASK.tgz] [EXTRA="hydra overrides"] bash scripts/gpu_default_run.sh OUT_DIR TASK [SECONDS]
# Wheels the lent machine lacks go in .whl (scripts/fetch_wheels.sh; Hydra: see gpu_team_runs.sh). tracking=none:
# MLflow is not among them. The run's console output goes to OUT_DIR/TASK.log (appended over the calls).
set -uo pipefail
out=${1:?give an output folder}; task=${2:?give a task: mla_decode or kda_prefill}; seconds=${3:-480}
read -r -a extra <<< "${EXTRA:-}"
root=/tmp/evoteam-default  # the same absolute path in every call: the resumed run finds itself where it was
mkdir -p "$out" "$root/cache"
out=$(cd "$out" && pwd)
. "$(dirname "$0")/device_env.sh"
use_wheels || exit 1
use_bwrap || exit 1
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=$root/cache
use_autotune_cache "$out" /tmp/default-triton-cache  # fla (the KDA baseline) tunes each shape once
run=$root/$task
if [ -n "${RUN_IN:-}" ]; then
  tar xzf "$RUN_IN" -C "$root" || { echo "cannot unpack $RUN_IN" >&2; exit 1; }
  args=(resume="$run")
  echo "=== resuming $run from $RUN_IN"
else
  args=(task="$task" tracking=none run_dir="$run" "${extra[@]}")
fi
timeout -s INT -k 60 "$seconds" python3 -m evoteam "${args[@]}" 2>&1 | tee -a "$out/$task.log" | grep -v "^  \["
rc=${PIPESTATUS[0]}
pack_runs "$out/run-$task.tgz" "$root" "$task" cache
case $rc in
  0) echo "=== $task: the run finished" ;;
  124|130) echo "=== $task: stopped after $seconds s; resume with RUN_IN=<this call's run-$task.tgz>" ;;
  *) echo "=== $task: the run failed (exit $rc)" ;;
esac
exit 0
