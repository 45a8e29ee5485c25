"""The tracker of one run: one MLflow run per evoteam run, a nested run per team configuration,
metrics after every evaluation, and at the end the kernels, tables, traces, team specs and plots.
See evoteam/tracking/__init__.py for what the runs hold."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evoteam.errors import UserError
from evoteam.team.journal import TeamRecord
from evoteam.tracking.plots import plot_steps
from evoteam.tracking.store import (
    KIND,
    PARAM_LIMIT,
    RUN_FILE,
    check_reachable,
    check_store_writable,
    current_sweep_id,
    flatten,
    get_or_create_experiment,
    load_mlflow,
    metric_name,
    resolve_uri,
    seed_sqlite_store,
    ui_hint,
)


class NullTracker:
    """tracking=none: every hook does nothing."""

    enabled = False
    run_id: str | None = None

    def start(self, config_file: Path | None = None) -> None:
        pass

    def sync(self, team_run) -> None:
        pass

    def finish(self, team_run, results: list, table: str, labels: dict[str, str] | None = None) -> None:
        pass

    def stop(self, status: str = "FAILED") -> None:
        pass


class Tracker(NullTracker):
    """One evoteam run in MLflow (see the module docstring)."""

    enabled = True

    def __init__(self, tracking_uri: str, experiment: str, run_dir: Path, *, config: dict | None = None,
                 tags: dict[str, str] | None = None, run_name: str | None = None, trace_llm: bool = False,
                 log: Any = None):
        self.run_dir = Path(run_dir)
        self.run_file = self.run_dir / RUN_FILE
        saved = json.loads(self.run_file.read_text()) if self.run_file.is_file() else None
        self.saved = saved
        # A resumed run stays in the store and run it started in.
        self.tracking_uri = saved["tracking_uri"] if saved else resolve_uri(tracking_uri)
        self.experiment = saved.get("experiment", experiment) if saved else experiment
        self.config = config or {}
        self.tags = {k: str(v) for k, v in (tags or {}).items()}
        self.run_name = run_name
        self.trace_llm = trace_llm
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.client = None
        self.run_id: str | None = saved["run_id"] if saved else None
        self.experiment_id: str | None = None
        self.team_runs: dict[int, str] = {}  # team index -> nested run id
        self.closed: set[int] = set()
        self.spec_team: dict[str, int] = {}  # spec_id -> team index
        self.last_step = 0
        self.last_tokens: tuple | None = None
        self._warned = False

    # ------------------------------------------------------------------ start
    def start(self, config_file: Path | None = None) -> None:
        mlflow = load_mlflow()
        from mlflow import MlflowClient

        check_reachable(self.tracking_uri)
        check_store_writable(self.tracking_uri)
        seed_sqlite_store(self.tracking_uri)
        try:
            self.client = MlflowClient(tracking_uri=self.tracking_uri)
            self.experiment_id = get_or_create_experiment(self.client, self.experiment, self.tracking_uri)
            if self.run_id is not None and not self._exists(self.run_id):
                self.log(f"mlflow: run {self.run_id} of {self.run_file} is not in {self.tracking_uri} any more; "
                         f"logging to a new run")
                self.run_id = None
            if self.run_id is not None:
                self._reopen()
            else:
                self._create(config_file)
            mlflow.set_tracking_uri(self.tracking_uri)
            mlflow.set_experiment(experiment_id=self.experiment_id)
            if mlflow.active_run() is not None:
                mlflow.end_run()
            mlflow.start_run(run_id=self.run_id)  # active, so that LLM traces link to this run
            if self.trace_llm:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import mlflow.litellm

                mlflow.litellm.autolog(silent=True)
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"tracking.tracking_uri={self.tracking_uri}: MLflow cannot log there "
                            f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); "
                            f"fix the URI or use tracking=none") from None
        where = f"{self.tracking_uri}, experiment {self.experiment!r}"
        print(f"mlflow: run {self.run_id} in {where}", flush=True)

    def _exists(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id).info.lifecycle_stage != "deleted"
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return False
            raise

    def _create(self, config_file: Path | None) -> None:
        from mlflow.entities import Param, RunTag

        tags = {KIND: "run", **{f"evoteam.{k}": v for k, v in self.tags.items()}}
        if self.run_name:
            tags["mlflow.runName"] = self.run_name
        run = self.client.create_run(self.experiment_id, tags=tags, run_name=self.run_name)
        self.run_id = run.info.run_id
        self.run_file.write_text(json.dumps({"run_id": self.run_id, "tracking_uri": self.tracking_uri,
                                             "experiment": self.experiment}, indent=1))
        params = [Param(k, v) for k, v in sorted(flatten(self.config).items()) if k != "resume"]
        for i in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        self.client.log_batch(self.run_id, tags=[RunTag("evoteam.run_dir", str(self.run_dir.resolve()))])
        if config_file is not None and Path(config_file).is_file():
            self.client.log_artifact(self.run_id, str(config_file))

    def _reopen(self) -> None:
        """A resumed run: the same MLflow run, its team runs and the last logged step."""
        self.client.update_run(self.run_id, status="RUNNING")
        children = self.client.search_runs([self.experiment_id],
                                           filter_string=f"tags.mlflow.parentRunId = '{self.run_id}'",
                                           max_results=1000)
        for child in children:
            index = child.data.tags.get("evoteam.team_index")
            if index is None:
                continue
            self.team_runs[int(index)] = child.info.run_id
            spec_id = child.data.params.get("spec_id")
            if spec_id:
                self.spec_team[spec_id] = int(index)
            if child.info.status == "FINISHED":
                self.closed.add(int(index))
        history = self.client.get_metric_history(self.run_id, "evaluations")
        self.last_step = max((int(m.step) for m in history), default=0)
        self.log(f"mlflow: continuing run {self.run_id} after evaluation {self.last_step}")

    # ------------------------------------------------------------------ during the run
    def _guard(self, what: str, fn, *args) -> None:
        """Tracking never stops a search: a failure is reported (once) and the run goes on."""
        try:
            fn(*args)
        except Exception as exc:
            if not self._warned:
                self.log(f"mlflow: could not log {what} ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}); the run goes on")
                self._warned = True

    def sync(self, team_run) -> None:
        """Mirror the team journal into nested runs and log the metrics of new evaluations."""
        if self.client is None:
            return
        self._guard("the team runs", self._sync_teams, team_run)
        self._guard("metrics", self._sync_metrics, team_run)

    def _sync_teams(self, team_run) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        for team in team_run.workspace.teams():
            index, spec = team.index, team.spec
            if index not in self.team_runs:
                roles = ", ".join(f"{r.name}:{r.kind}" for r in spec.roles)
                name = f"team {index}: {spec.name}"
                tags = {KIND: "team", "mlflow.parentRunId": self.run_id, "mlflow.runName": name,
                        "evoteam.team_index": str(index), "evoteam.designed_by": team.designed_by,
                        "evoteam.reason": spec.reason[:5000], "evoteam.expected_effect": spec.expected_effect[:5000],
                        **{f"evoteam.{k}": v for k, v in self.tags.items()}}
                run = self.client.create_run(self.experiment_id, tags=tags, run_name=name)
                rid = run.info.run_id
                params = {"name": spec.name, "spec_id": spec.spec_id, "parent": spec.parent,
                          "topology": spec.topology, "roles": roles, "order": ",".join(spec.order) or "as listed",
                          "stall_evaluations": spec.stall_evaluations, "evolvable": spec.evolvable,
                          "designed_by": team.designed_by, "at_evaluation": team.at_evaluation,
                          "reason": spec.reason, "expected_effect": spec.expected_effect}
                self.client.log_batch(rid, params=[Param(k, ("null" if v is None else str(v))[:PARAM_LIMIT])
                                                   for k, v in params.items()])
                self._log_json(rid, "team_spec.json", team.start_json())
                self.team_runs[index] = rid
                self.spec_team[spec.spec_id] = index
            end = team.outcome
            if end is not None and index not in self.closed:
                rid = self.team_runs[index]
                values = {"team_evaluations": end.evaluations, "best_before": end.best_before,
                          "best_after": end.best_after, "team_correct_rate": end.correct_rate,
                          "team_tokens_total": end.tokens.total_tokens, "team_tokens_prompt": end.tokens.prompt_tokens,
                          "team_tokens_completion": end.tokens.completion_tokens, "team_cost_usd": end.tokens.cost_usd}
                metrics = [Metric(k, float(v), now, 0) for k, v in values.items() if v is not None]
                self.client.log_batch(rid, metrics=metrics, tags=[RunTag("evoteam.verdict", end.verdict)])
                self._log_json(rid, "team_outcome.json", end.to_json())
                self.client.set_terminated(rid, "FINISHED")
                self.closed.add(index)

    def _sync_metrics(self, team_run) -> None:
        from mlflow.entities import Metric

        from evoteam.team.progress import progress_of

        attempts = team_run.workspace.attempts
        ledger = team_run.ledger
        total = ledger.total
        roles = {r.name: 0 for team in team_run.workspace.teams() for r in team.spec.roles}
        for key, usage in ledger.by_role.items():
            role = key.split("/", 1)[-1]
            roles[role] = roles.get(role, 0) + usage.total_tokens
        tokens = {"tokens_prompt": total.prompt_tokens, "tokens_completion": total.completion_tokens,
                  "tokens_total": total.total_tokens, "cost_usd": total.cost_usd,
                  **{metric_name(f"tokens_role/{r}"): v for r, v in sorted(roles.items())}}
        now = int(time.time() * 1000)
        parent: list = []
        by_team: dict[str, list] = {}
        for step in range(self.last_step + 1, len(attempts) + 1):
            p = progress_of(attempts[:step], team_run.groups)
            values = {"evaluations": step, "passed": p.passed, "correct_rate": p.correct_rate, **tokens}
            if p.best_geomean is not None:
                values["best_geomean_speedup"] = p.best_geomean
            parent += [Metric(k, float(v), now, step) for k, v in values.items()]
            team = attempts[step - 1].team
            if team in self.spec_team:
                by_team.setdefault(self.team_runs[self.spec_team[team]], []).extend(
                    Metric(k, float(v), now, step) for k, v in values.items()
                    if k in ("best_geomean_speedup", "correct_rate", "evaluations"))
        step = max(len(attempts), self.last_step)
        snapshot = tuple(sorted(tokens.items()))
        if not parent and snapshot != self.last_tokens and step > 0:  # tokens spent without a new evaluation
            parent = [Metric(k, float(v), now, step) for k, v in tokens.items()]
        if parent:
            parent.append(Metric("wall_time_s", float(ledger.elapsed_s()), now, step))
            parent.append(Metric("queue_s", float(ledger.queue_s), now, step))  # waiting for a GPU: not charged
        for i in range(0, len(parent), 900):
            self.client.log_batch(self.run_id, metrics=parent[i:i + 900])
        for rid, metrics in by_team.items():
            for i in range(0, len(metrics), 900):
                self.client.log_batch(rid, metrics=metrics[i:i + 900])
        self.last_step = step
        self.last_tokens = snapshot

    def _log_json(self, run_id: str, name: str, obj: Any) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(json.dumps(obj, indent=1, default=str))
            self.client.log_artifact(run_id, str(path))

    # ------------------------------------------------------------------ the end
    def finish(self, team_run, results: list, table: str, labels: dict[str, str] | None = None) -> None:
        """Final metrics and artifacts, then the run is FINISHED."""
        if self.client is None:
            return
        self.sync(team_run)
        self._guard("the final results", self._finish, team_run, results, table, labels or {})
        self.stop("FINISHED")
        print(f"mlflow: see the run: {ui_hint(self.tracking_uri, self.experiment_id, self.run_id)}", flush=True)

    def _finish(self, team_run, results: list, table: str, labels: dict[str, str]) -> None:
        from mlflow.entities import Metric

        from evoteam import report

        run_dir = Path(team_run.run_dir)
        final = run_dir / "final"
        summary = report.summarize(results)
        total = team_run.ledger.total
        # workloads whose figure is the inherited measurement's (no team measured a kernel there)
        reused = json.loads((final / "reused.json").read_text()) if (final / "reused.json").is_file() else {}
        values = {**final_metrics(summary), "final_tokens_total": total.total_tokens,
                  "final_cost_usd": total.cost_usd, "final_evaluations": team_run.ledger.evaluations,
                  "final_reused_workloads": len(reused)}
        now = int(time.time() * 1000)
        step = team_run.ledger.evaluations
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in values.items()
                                                    if v is not None])
        if (final / "kernels").is_dir():
            self.client.log_artifacts(self.run_id, str(final / "kernels"), "kernels")
        rows = [{"workload": r.uuid, "shape": labels.get(r.uuid, ""), "status": r.status, "baseline": r.baseline,
                 "baseline_ms": r.baseline_ms, "candidate_ms": r.candidate_ms, "speedup": r.speedup,
                 "noise": r.noise, "timing_mode": r.timing_mode, "detail": r.detail,
                 "measured": "inherited measurement" if r.uuid in reused else "final table"} for r in results]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "results"
            out.mkdir()
            (out / "table.txt").write_text(table + "\n")
            (out / "table.json").write_text(json.dumps({"rows": rows, "summary": values}, indent=1))
            for name in ("results.json", "dispatch.json", "reused.json"):
                if (final / name).is_file():
                    (out / name).write_text((final / name).read_text())
            self.client.log_artifacts(self.run_id, str(out), "results")
            plots = Path(tmp) / "plots"
            plots.mkdir()
            self._plots(plots, team_run.workspace.teams())
            self.client.log_artifacts(self.run_id, str(plots), "plots")
        for path, where in ((final / "traces.jsonl", "traces"), (run_dir / "workspace" / "teams.jsonl", "teams")):
            if path.is_file():
                self.client.log_artifact(self.run_id, str(path), where)

    def _history(self, key: str) -> dict[int, float]:
        """step -> the last value logged at that step."""
        out: dict[int, float] = {}
        for m in sorted(self.client.get_metric_history(self.run_id, key), key=lambda m: (m.step, m.timestamp)):
            out[int(m.step)] = m.value
        return out

    def _plots(self, folder: Path, teams: list[TeamRecord]) -> None:
        best = self._history("best_geomean_speedup")
        tokens = self._history("tokens_total")
        steps = sorted(set(best) | set(tokens))
        series_best, series_tokens, last_tokens = [], [], 0.0
        for s in steps:
            last_tokens = tokens.get(s, last_tokens)
            if s in best:
                series_best.append((s, best[s]))
                series_tokens.append((last_tokens, best[s]))
        title = f"{self.tags.get('task', '')} on {self.tags.get('hardware', '')}: {self.tags.get('team_preset', '')}" \
                f", budget {self.tags.get('budget_mode', '')}"
        marks = [(t.at_evaluation + 0.5, f"team {t.index}: {t.spec.name}") for t in teams if t.index > 0]
        plot_steps(series_best, "evaluations", title, folder / "best_speedup_vs_evaluations.png", marks)
        note = "" if any(t for t, _ in series_tokens) else " (no LLM tokens: offline policy)"
        plot_steps(series_tokens, "tokens spent (prompt + completion)" + note, title,
                   folder / "best_speedup_vs_tokens.png")

    def stop(self, status: str = "FAILED") -> None:
        """End the MLflow run with `status` (FINISHED, FAILED, KILLED); resume reopens it."""
        if self.client is None:
            return
        mlflow = load_mlflow()
        try:
            active = mlflow.active_run()
            if active is not None and active.info.run_id == self.run_id:
                mlflow.end_run(status)
            else:
                self.client.set_terminated(self.run_id, status)
            if status != "FINISHED":
                for index, rid in self.team_runs.items():
                    if index not in self.closed:
                        self.client.set_terminated(rid, status)
        except Exception as exc:
            self.log(f"mlflow: could not end run {self.run_id} ({type(exc).__name__}: {exc})")
        self.client = None


# The final table's summary figures (report.Summary), each logged under its own name prefixed final_: the geomean's
# 95% bootstrap interval is geomean_ci_low/_high in bench's JSON report and final_geomean_ci_low/_high here.
SUMMARY_METRICS = ("geomean_speedup", "geomean_ci_low", "geomean_ci_high", "wins", "worst_speedup", "passed",
                   "workloads")


def final_metrics(summary) -> dict[str, float | None]:
    """The summary's figures as final metrics, KernelBench's fast_p included (final_fast_p_1, _1.1, _1.25)."""
    return {**{f"final_{name}": getattr(summary, name) for name in SUMMARY_METRICS},
            **{f"final_fast_p_{p:g}": v for p, v in summary.fast_p.items()}}


def _value(x: Any) -> Any:
    return getattr(x, "value", x)  # Enum members of the structured config


def open_tracker(cfg, run_dir: Path, tags: dict[str, str]) -> NullTracker:
    """The tracker the configuration asks for (not started). `tags` are evoteam's (hardware, task,
    budget_mode, team_preset, llm, timing_mode); the sweep id is added here."""
    if _value(cfg.tracking.backend) != "mlflow":
        return NullTracker()
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    tags = {**tags, "sweep_id": current_sweep_id()}
    name = f"{tags.get('task')}-{tags.get('hardware')}-{tags.get('team_preset')}-{tags.get('budget_mode')}"
    return Tracker(cfg.tracking.tracking_uri, cfg.tracking.experiment, run_dir, config=config, tags=tags,
                   run_name=name, trace_llm=tags.get("llm", "offline") != "offline")
