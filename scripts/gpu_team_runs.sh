#!/usr/bin/env bash
# Issue 4 on one NVIDIA GPU: a short offline run (llm=offline) per task with the three team presets at
# the same evaluation budget. Usage from the repository root:
#   [EXTRA="hydra overrides"] bash scripts/gpu_team_runs.sh OUT_DIR [EVALUATIONS] [TASK ...]
# Each run's full output (team history included) goes to OUT_DIR/<task>-<team>.log.
# Wheels the lent machine lacks go in .whl: scripts/fetch_wheels.sh, and for Hydra
#   .venv/bin/pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3 hydra-core==1.3.8 omegaconf==2.3.0
set -uo pipefail
out=${1:?give an output folder}; evals=${2:-8}; shift $(( $# > 1 ? 2 : 1 ))
tasks=${*:-mla_decode kda_prefill}
# More Hydra overrides for every run, e.g. EXTRA="task.workloads=[15208288,d8c3b3c2]"
read -r -a extra <<< "${EXTRA:-}"
mkdir -p "$out"
. "$(dirname "$0")/device_env.sh"
use_wheels || exit 1
use_bwrap || exit 1  # the candidates' sandbox (bubblewrap), from .devtools/ where the host lacks it
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=$out/cache
use_autotune_cache "$out" /tmp/team-triton-cache  # fla's autotuning (the KDA runs' baseline): AUTOTUNE_IN in, out/autotune.tgz
for task in $tasks; do
  for team in single fixed4 evolving; do
    echo "=== $task, team=$team, $evals evaluations"
    python3 -m evoteam hardware=auto task=$task team=$team llm=offline tracking=none budget=equal \
      budget.max_evaluations=$evals seed=1 run_dir="$out/$task-$team" "${extra[@]}" 2>&1 \
      | tee "$out/$task-$team.log" | grep -v "^  \[" | tail -60
  done
done
