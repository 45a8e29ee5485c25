#!/usr/bin/env bash
# The three team presets at the same evaluation budget (llm=offline; each from the same inheritance, by default
# the target's champion, measured once by the first and shared with the others through the cache carried between
# calls: workspace.share_hours) per task, on one NVIDIA GPU, across calls shorter than the runs. Usage from the
# repository root:
#   [STOP_AFTER=SECONDS] [RUN_IN=.device-cache/team-runs.tgz] [EXTRA="hydra overrides"] \
#     bash scripts/gpu_team_runs.sh OUT_DIR [EVALUATIONS] [TASK ...]
# Each run's console output goes to OUT_DIR/<task>-<team>.log (appended over the calls). With STOP_AFTER, the run
# in progress is stopped as by Ctrl-C when that many seconds have passed (it keeps its state) and no new one
# starts; every run folder and the baseline cache are packed into OUT_DIR/team-runs.tgz, and a later call given
# that archive (RUN_IN) resumes the unfinished runs and skips the finished ones (those with a final table).
# Wheels the lent machine lacks go in .whl: scripts/fetch_wheels.sh.
set -uo pipefail
out=${1:?give an output folder}; evals=${2:-8}; shift $(( $# > 1 ? 2 : 1 ))
tasks=${*:-mla_decode kda_prefill}
# The paper's matrix: BUDGETS="equal extra" (extra: budget.extra_multiplier times the evaluations) and SEEDS="1 2";
# each run is <task>-<team>[-<budget>-s<seed>] (the defaults, equal and seed 1, keep the older runs' names)
read -r -a budgets <<< "${BUDGETS:-equal}"
read -r -a seeds <<< "${SEEDS:-1}"
# TRACKING="mlflow tracking.tracking_uri=sqlite:////tmp/evoteam-teams/mlflow.db": every run in one store under the
# root, which the archive carries back (default none)
read -r -a tracking <<< "${TRACKING:-none}"
tracking[0]=tracking=${tracking[0]}
read -r -a extra <<< "${EXTRA:-}"  # e.g. EXTRA="task.workloads=[15208288,d8c3b3c2]"
root=/tmp/evoteam-teams  # the same absolute path in every call: a resumed run finds itself where it was
mkdir -p "$out" "$root/cache"
out=$(cd "$out" && pwd)
. "$(dirname "$0")/device_env.sh"
use_wheels || exit 1
use_bwrap || exit 1  # the candidates' sandbox (bubblewrap), from .devtools/ where the host lacks it
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=$root/cache
use_autotune_cache "$out" /tmp/team-triton-cache  # fla's autotuning (the KDA runs' baseline): AUTOTUNE_IN in, out/autotune.tgz
if [ -n "${RUN_IN:-}" ]; then
  tar xzf "$RUN_IN" -C "$root" || { echo "cannot unpack $RUN_IN" >&2; exit 1; }
fi
start=$SECONDS
for task in $tasks; do
  for budget in "${budgets[@]}"; do for seed in "${seeds[@]}"; do for team in single fixed4 evolving; do
    run=$root/$task-$team
    [ "$budget/$seed" = equal/1 ] || run=$run-$budget-s$seed
    if [ -f "$run/final/results.json" ]; then
      echo "=== ${run##*/}: finished in an earlier call"
      continue
    fi
    limit=()
    if [ -n "${STOP_AFTER:-}" ]; then
      left=$(( STOP_AFTER - (SECONDS - start) ))
      [ "$left" -ge 30 ] || { echo "=== ${run##*/}: not started ($STOP_AFTER s spent)"; continue; }
      limit=(timeout -s INT -k 60 "$left")
    fi
    if [ -f "$run/state.json" ]; then
      echo "=== ${run##*/}: resuming"
      args=(resume="$run")
    else
      echo "=== ${run##*/}: budget $budget, $evals evaluations at equal budget, seed $seed"
      args=(hardware=auto task="$task" team="$team" llm=offline "${tracking[@]}" budget="$budget"
            budget.max_evaluations="$evals" seed="$seed" run_dir="$run" "${extra[@]}")
    fi
    "${limit[@]}" python3 -m evoteam "${args[@]}" 2>&1 | tee -a "$out/${run##*/}.log" | grep -v "^  \[" | tail -60
  done; done; done
done
pack_runs "$out/team-runs.tgz" "$root" cache $(cd "$root" && ls -d ./*-single* ./*-fixed4* ./*-evolving* ./mlflow.db \
  ./mlartifacts 2>/dev/null)
echo "=== runs packed in team-runs.tgz; a later call resumes the unfinished ones with RUN_IN=<that archive>"
