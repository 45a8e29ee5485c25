"""MLflow tracking of a run: one MLflow run per evoteam run, a nested run per team configuration,
metrics after every evaluation, the final kernels, tables, traces, team specs and plots as
artifacts, and LLM calls traced through MLflow's litellm autologging.

    tracker = open_tracker(cfg, run_dir, tags={...})    # Tracker, or NullTracker for tracking=none
    tracker.start(config_file=run_dir / "config.yaml")
    TeamRun(..., on_turn=tracker.sync)                  # metrics and team runs after every turn
    tracker.finish(team_run, results, table_text, labels)

The default store is `sqlite:///evoteam-mlflow.db` in the working directory (artifacts beside it in
`mlartifacts/`); `tracking.tracking_uri=http://host:5000` logs to a tracking server (see mlflow/).
The MLflow run id is kept in the run directory (`mlflow_run.json`), so `resume=<run dir>`
continues the same MLflow run. What the runs hold:

- tags: `evoteam.kind` (run, team or summary), `evoteam.hardware`, `evoteam.task`,
  `evoteam.budget_mode`, `evoteam.team_preset`, `evoteam.llm`, `evoteam.timing_mode`,
  `evoteam.sweep_id` (the multirun's sweep folder name, or "none"), `evoteam.seed` (the run's seed: repeated
  runs of one configuration differ in it);
- params: the resolved configuration, flattened (`budget.tokens`, ...); artifact `config.yaml`;
- metrics with step = evaluations so far: `best_geomean_speedup` (running maximum of verified
  geomean speedups), `correct_rate`, `passed`, `evaluations`, `tokens_prompt`, `tokens_completion`,
  `tokens_total`, `tokens_role/<role>`, `cost_usd`, `wall_time_s`; at the end `final_geomean_speedup`,
  `final_wins`, `final_worst_speedup`, `final_passed`, `final_workloads`, `final_tokens_total`,
  `final_cost_usd`, `final_evaluations`, `final_geomean_ci_low` / `_high` (its 95% bootstrap interval over the
  workloads), `final_fast_p_1`, `final_fast_p_1.1`, `final_fast_p_1.25` (KernelBench's fast_p);
- one nested run per team (`evoteam.kind=team`): its spec (params and `team_spec.json`), the
  supervisor's reason and expected effect, and its outcome (metrics, `evoteam.verdict` tag).

Modules: `store` (where the store is, its experiments, names), `tracker` (Tracker, open_tracker),
`plots` (the figures). The sweep's summary is `evoteam.compare` (its Hydra callback lives there).
mlflow is imported on first use only.
"""

from evoteam.tracking.plots import figure, plot_steps, save_axes
from evoteam.tracking.store import (
    ARTIFACTS_DIR,
    DEFAULT_EXPERIMENT,
    DEFAULT_URI,
    KIND,
    RUN_FILE,
    SWEEP,
    check_reachable,
    check_store_writable,
    current_sweep_id,
    flatten,
    get_or_create_experiment,
    load_mlflow,
    resolve_uri,
    seed_sqlite_store,
    sqlite_path,
)
from evoteam.tracking.tracker import NullTracker, Tracker, open_tracker

__all__ = ["ARTIFACTS_DIR", "DEFAULT_EXPERIMENT", "DEFAULT_URI", "KIND", "RUN_FILE", "SWEEP", "NullTracker", "Tracker",
           "check_reachable", "check_store_writable", "current_sweep_id", "flatten", "get_or_create_experiment", "load_mlflow",
           "figure", "open_tracker", "plot_steps", "resolve_uri", "save_axes", "seed_sqlite_store", "sqlite_path"]
