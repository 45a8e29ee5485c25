"""`python -m evoteam.compare`: equal-budget against extra-budget final speedups per team preset,
hardware and task, read from the evoteam runs in MLflow (not the nested team runs, not earlier
summaries), printed as a table and logged as a summary MLflow run (tag `evoteam.kind=summary`) with
the table (markdown and CSV) and plots as artifacts.

    python -m evoteam.compare                                   # the default store, every run
    python -m evoteam.compare --sweep-id 2026-01-01_12-00-00    # one multirun's jobs
    python -m evoteam.compare --tracking-uri http://mlflow.example:5000 --experiment evoteam --no-log

A multirun (`python -m evoteam -m budget=equal,extra team=single,fixed4,evolving repeat=3`) ends with this
comparison of its own jobs (the Hydra callback `SweepSummary` below). Several runs of the same cell (repeat=N:
seeds 1..N) are combined: the final speedups by geometric mean with its 95% bootstrap interval over the runs (and
their median and mean), wins and tokens by mean. Runs on the same seed are paired: extra against equal budget per
team preset, and preset against preset per budget, each with the geometric mean of the per-seed ratios, its
interval, a permutation test's p-value and a verdict ("within noise" unless both say otherwise; evoteam.uncertainty).
Bad input (no such store, experiment or runs): one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy

from evoteam.errors import EXIT_BAD_INPUT, UserError
from evoteam.harness.model import geomean
from evoteam.tracking.plots import figure, save_axes
from evoteam.tracking.store import (
    DEFAULT_EXPERIMENT,
    DEFAULT_URI,
    KIND,
    SWEEP,
    check_reachable,
    load_mlflow,
    resolve_uri,
    sqlite_path,
)
from evoteam.uncertainty import Estimate, Paired, geomean_interval, paired_difference

MODES = ("equal", "extra")
TEAM_ORDER = {"single": 0, "fixed4": 1, "evolving": 2}


class CompareError(UserError):
    """Nothing to compare, or nowhere to read from; the message says which."""


@dataclass
class RunRow:
    run_id: str
    team: str
    hardware: str
    task: str
    budget: str
    sweep_id: str
    geomean: float | None
    wins: float
    workloads: float
    passed: float
    tokens: float
    cost: float
    evaluations: float
    seed: str = "none"


@dataclass
class Cell:
    runs: int = 0
    wins: float | None = None
    workloads: float | None = None
    tokens: float | None = None
    interval: Estimate | None = None  # the geomean over runs with its 95% bootstrap interval
    median: float | None = None
    mean: float | None = None
    seeds: dict[str, float] = field(default_factory=dict)  # final geomean per seed (for the paired comparisons)

    @property
    def geomean(self) -> float | None:
        return self.interval.value if self.interval is not None else None


@dataclass
class Row:
    team: str
    hardware: str
    task: str
    cells: dict[str, Cell]
    paired: Paired | None = None  # extra against equal budget, runs on the same seeds

    @property
    def ratio(self) -> float | None:
        if self.paired is not None and self.paired.ratio.value is not None:
            return self.paired.ratio.value
        eq, ex = self.cells["equal"].geomean, self.cells["extra"].geomean
        return ex / eq if eq and ex else None


@dataclass
class PresetPair:
    """Preset b against preset a, on one target and budget, over the seeds both ran."""

    hardware: str
    task: str
    budget: str
    a: str
    b: str
    paired: Paired


def _quote(value: str) -> str:
    return value.replace("'", "\\'")


def load_runs(client, experiment_id: str, sweep_id: str | None = None) -> list[RunRow]:
    """The finished evoteam runs (tag evoteam.kind=run) of the experiment, of one sweep if given."""
    filters = [f"tags.`{KIND}` = 'run'", "attributes.status = 'FINISHED'"]
    if sweep_id:
        filters.append(f"tags.`{SWEEP}` = '{_quote(sweep_id)}'")
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=" and ".join(filters), max_results=1000,
                                  page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            break
    rows = []
    for run in runs:
        t, m = run.data.tags, run.data.metrics
        if "final_workloads" not in m:
            continue  # ended before its final measurement
        rows.append(RunRow(run_id=run.info.run_id, team=t.get("evoteam.team_preset", "?"),
                           hardware=t.get("evoteam.hardware", "?"), task=t.get("evoteam.task", "?"),
                           budget=t.get("evoteam.budget_mode", "?"), sweep_id=t.get(SWEEP, "none"),
                           geomean=m.get("final_geomean_speedup"), wins=m.get("final_wins", 0.0),
                           workloads=m["final_workloads"], passed=m.get("final_passed", 0.0),
                           tokens=m.get("final_tokens_total", 0.0), cost=m.get("final_cost_usd", 0.0),
                           evaluations=m.get("final_evaluations", 0.0),
                           seed=t.get("evoteam.seed") or run.data.params.get("seed", "none")))
    return rows


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _by_seed(runs: list[RunRow]) -> dict[str, float]:
    """Final geomean per seed (several runs of one seed: their geometric mean); runs without a seed are left out."""
    groups: dict[str, list[float | None]] = {}
    for r in runs:
        if r.seed not in ("none", "None", ""):
            groups.setdefault(r.seed, []).append(r.geomean)
    return {seed: g for seed, values in groups.items() if (g := geomean(values)) is not None}


def _pair(a: dict[str, float], b: dict[str, float]) -> Paired:
    common = sorted(set(a) & set(b))
    return paired_difference([a[k] for k in common], [b[k] for k in common])


def build_table(rows: list[RunRow]) -> list[Row]:
    groups: dict[tuple[str, str, str], dict[str, list[RunRow]]] = {}
    for r in rows:
        groups.setdefault((r.team, r.hardware, r.task), {m: [] for m in MODES}).setdefault(r.budget, []).append(r)
    table = []
    for (team, hw, task), by_mode in groups.items():
        cells = {}
        for mode in MODES:
            runs = by_mode.get(mode, [])
            finals = [r.geomean for r in runs if r.geomean is not None]
            interval = geomean_interval(finals)
            cells[mode] = Cell(runs=len(runs), interval=interval,
                               median=statistics.median(finals) if finals else None, mean=_mean(finals),
                               wins=_mean([r.wins for r in runs]), workloads=_mean([r.workloads for r in runs]),
                               tokens=_mean([r.tokens for r in runs]), seeds=_by_seed(runs))
        both = cells["equal"].seeds and cells["extra"].seeds
        table.append(Row(team, hw, task, cells, _pair(cells["equal"].seeds, cells["extra"].seeds) if both else None))
    table.sort(key=lambda r: (r.task, r.hardware, TEAM_ORDER.get(r.team, 9), r.team))
    return table


def preset_pairs(table: list[Row]) -> list[PresetPair]:
    """Every two presets of one target and budget that ran on common seeds: the later preset (single, fixed4,
    evolving order) against the earlier."""
    out = []
    for mode in MODES:
        for i, a in enumerate(table):
            for b in table[i + 1:]:
                if (a.hardware, a.task) != (b.hardware, b.task):
                    continue
                sa, sb = a.cells[mode].seeds, b.cells[mode].seeds
                if set(sa) & set(sb):
                    out.append(PresetPair(a.hardware, a.task, mode, a.team, b.team, _pair(sa, sb)))
    return out


def _num(v: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "-" if v is None else format(v, spec) + suffix


def _wins(c: Cell) -> str:
    if c.wins is None:
        return "-"
    return f"{c.wins:g}/{c.workloads:g}"


HEADER = ["team", "hardware", "task", "equal speedup [95% CI]", "extra speedup [95% CI]", "extra/equal [95% CI]",
          "extra vs equal", "equal wins", "extra wins", "equal tokens", "extra tokens", "runs equal/extra"]
PAIR_HEADER = ["budget", "hardware", "task", "a", "b", "b/a [95% CI]", "p", "verdict", "seeds"]


def _interval(c: Cell) -> str:
    return c.interval.text() if c.interval is not None else "-"


def _verdict(p: Paired | None) -> str:
    if p is None:
        return "-"
    return f"{p.verdict} (p {p.p_value:.2f})" if p.p_value is not None else p.verdict


def _cells(r: Row) -> list[str]:
    eq, ex = r.cells["equal"], r.cells["extra"]
    ratio = r.paired.ratio.text(".2f") if r.paired is not None else _num(r.ratio, ".2f", "x")
    return [r.team, r.hardware, r.task, _interval(eq), _interval(ex), ratio, _verdict(r.paired), _wins(eq),
            _wins(ex), _num(eq.tokens, ".0f"), _num(ex.tokens, ".0f"), f"{eq.runs}/{ex.runs}"]


def _pair_cells(p: PresetPair) -> list[str]:
    return [p.budget, p.hardware, p.task, p.a, p.b, p.paired.ratio.text(".3f"),
            "-" if p.paired.p_value is None else f"{p.paired.p_value:.2f}", p.paired.verdict, str(p.paired.ratio.n)]


def _markdown(header: list[str], body: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(b, widths)) + " |" for b in body]
    return "\n".join(lines)


def markdown(table: list[Row], pairs: list[PresetPair] | None = None) -> str:
    text = _markdown(HEADER, [_cells(r) for r in table])
    if pairs:
        text += ("\n\npreset against preset, runs on the same seeds (b/a: the geometric mean of the per-seed ratios of "
                 "final speedups):\n\n" + _markdown(PAIR_HEADER, [_pair_cells(p) for p in pairs]))
    return text


def csv_text(table: list[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["team", "hardware", "task"] + [f"{m}_{k}" for m in MODES
                                                    for k in ("runs", "geomean", "wins", "workloads", "tokens",
                                                              "geomean_ci_low", "geomean_ci_high", "median", "mean")]
                    + ["extra_over_equal", "extra_over_equal_ci_low", "extra_over_equal_ci_high",
                       "extra_over_equal_p", "extra_vs_equal_verdict"])
    for r in table:
        row = [r.team, r.hardware, r.task]
        for m in MODES:
            c = r.cells[m]
            iv = c.interval
            row += [c.runs] + ["" if v is None else v for v in (c.geomean, c.wins, c.workloads, c.tokens,
                                                                 iv.low if iv else None, iv.high if iv else None,
                                                                 c.median, c.mean)]
        p = r.paired
        row += ["" if v is None else v for v in (r.ratio, p.ratio.low if p else None, p.ratio.high if p else None,
                                                 p.p_value if p else None)] + [p.verdict if p else ""]
        writer.writerow(row)
    return out.getvalue()


def plot_speedups(table: list[Row], path: Path, title: str) -> None:
    """Grouped bars: final geomean speedup per team preset (and hardware/task), equal vs extra, with the 95%
    interval over each cell's runs as error bars."""
    labels = [r.team if len({(x.hardware, x.task) for x in table}) == 1 else f"{r.team}\n{r.hardware}/{r.task}"
              for r in table]
    fig, ax = figure(max(6.4, 1.2 * len(table) + 2), 4.2)
    width = 0.38
    for i, mode in enumerate(MODES):
        xs = [j + (i - 0.5) * width for j in range(len(table))]
        ys = [r.cells[mode].geomean or 0.0 for r in table]
        # the 95% interval over the cell's runs as an error bar (none for a single run)
        errs = [[max(0.0, y - (r.cells[mode].interval.low or y)) if r.cells[mode].interval else 0.0
                 for y, r in zip(ys, table)],
                [max(0.0, (r.cells[mode].interval.high or y) - y) if r.cells[mode].interval else 0.0
                 for y, r in zip(ys, table)]]
        bars = ax.bar(xs, ys, width, label=f"{mode} budget", yerr=errs, capsize=3)
        for bar, r in zip(bars, table):
            v = r.cells[mode].geomean
            ax.annotate(_num(v, ".2f", "x"), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    if max((c.geomean or 0.0) for r in table for c in r.cells.values()) >= 0.5:
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(table)), labels, fontsize=8)
    ax.set_ylabel("final geomean speedup vs baseline (x)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def plot_tokens(rows: list[RunRow], path: Path, title: str) -> None:
    """Every run: final speedup against tokens spent, by team preset and budget mode."""
    fig, ax = figure(6.4, 4.2)
    markers = {"equal": "o", "extra": "^"}
    teams = sorted({r.team for r in rows}, key=lambda t: (TEAM_ORDER.get(t, 9), t))
    colours = {t: f"C{i}" for i, t in enumerate(teams)}
    for r in rows:
        if r.geomean is None:
            continue
        ax.scatter(r.tokens, r.geomean, marker=markers.get(r.budget, "s"), color=colours[r.team],
                   label=f"{r.team}, {r.budget}")
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=7)
    if max((r.geomean or 0.0) for r in rows) >= 0.5:
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    save_axes(fig, ax, "tokens spent (prompt + completion)", "final geomean speedup (x)", title, path)


def plot_progress(client, runs: list[RunRow], path: Path, title: str) -> bool:
    """Best verified speedup against evaluations, one line per team preset and budget (the median over its runs'
    seeds) with a band over them (their range); read from each run's `best_geomean_speedup` history. False where no
    run has one."""
    curves: dict[tuple[str, str], list[dict[int, float]]] = {}
    for r in runs:
        try:
            history = client.get_metric_history(r.run_id, "best_geomean_speedup")
        except Exception:  # noqa: BLE001 - a run without the metric (or a store that lost it): left out
            continue
        if history:
            curves.setdefault((r.team, r.budget), []).append({int(m.step): float(m.value) for m in history})
    if not curves:
        return False
    fig, ax = figure(6.4, 4.2)
    for i, ((team, budget), series) in enumerate(sorted(curves.items())):
        steps = sorted({s for c in series for s in c})
        # each run's running best carried forward to every step (a run that ended earlier keeps its last)
        filled = [[max([v for k, v in c.items() if k <= s], default=float("nan")) for s in steps] for c in series]
        rows = numpy.array(filled, dtype=float)
        with numpy.errstate(all="ignore"):
            mid, low, high = (numpy.nanmedian(rows, 0), numpy.nanmin(rows, 0), numpy.nanmax(rows, 0))
        style = "-" if budget == "equal" else "--"
        ax.plot(steps, mid, style, color=f"C{i}", label=f"{team}, {budget} ({len(series)} runs)")
        ax.fill_between(steps, low, high, color=f"C{i}", alpha=0.2)
    ax.legend(fontsize=7)
    save_axes(fig, ax, "evaluations", "best verified geomean speedup (x)",
              f"{title}\nlines: the median over seeds; bands: their range", path)
    return True


@dataclass
class Comparison:
    runs: list[RunRow]
    table: list[Row]
    markdown: str
    summary_run_id: str | None
    pairs: list[PresetPair] = field(default_factory=list)


def open_store(tracking_uri: str, experiment: str):
    """(client, experiment id) for an existing store and experiment, else CompareError."""
    uri = resolve_uri(tracking_uri)
    db = sqlite_path(uri)
    if db is not None and not db.is_file():
        raise CompareError(f"no MLflow store at {tracking_uri} ({db} does not exist); give --tracking-uri "
                           f"of the store the runs logged to")
    if not uri.startswith(("sqlite:", "http://", "https://", "postgresql", "mysql", "mssql", "databricks")):
        raise CompareError(f"--tracking-uri {tracking_uri}: not a tracking store URI; use sqlite:///<file>.db "
                           f"or http://<host>:<port>")
    try:
        check_reachable(uri, "--tracking-uri")
    except UserError as exc:
        raise CompareError(str(exc)) from None
    load_mlflow()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        found = client.get_experiment_by_name(experiment)
    except Exception as exc:
        raise CompareError(f"--tracking-uri {tracking_uri}: cannot read the store ({type(exc).__name__}: "
                           f"{' '.join(str(exc).split())[:200]})") from None
    if found is None:
        names = [e.name for e in client.search_experiments(max_results=50)]
        raise CompareError(f"no experiment {experiment!r} at {tracking_uri}; experiments there: "
                           f"{', '.join(names) or 'none'}")
    return client, found.experiment_id


def compare(tracking_uri: str = DEFAULT_URI, experiment: str = DEFAULT_EXPERIMENT, sweep_id: str | None = None, *,
            log_summary: bool = True, out=print) -> Comparison:
    client, experiment_id = open_store(tracking_uri, experiment)
    runs = load_runs(client, experiment_id, sweep_id)
    if not runs:
        where = f"sweep {sweep_id!r} of " if sweep_id else ""
        raise CompareError(f"no finished evoteam runs in {where}experiment {experiment!r} at {tracking_uri}")
    table = build_table(runs)
    pairs = preset_pairs(table)
    text = markdown(table, pairs)
    scope = f"sweep {sweep_id}" if sweep_id else f"experiment {experiment}"
    out(f"\nequal vs extra budget, final geomean speedup vs the baseline ({len(runs)} runs, {scope}; a cell's "
        f"geomean over its runs with its 95% bootstrap interval; extra/equal and the verdict from runs paired by "
        f"seed):\n{text}")
    summary_id = None
    if log_summary:
        summary_id = _log_summary(client, experiment_id, sweep_id, runs, table, text, scope, pairs)
        out(f"mlflow: summary run {summary_id} in {tracking_uri}, experiment {experiment!r}")
    return Comparison(runs, table, text, summary_id, pairs)


def _log_summary(client, experiment_id: str, sweep_id: str | None, runs: list[RunRow], table: list[Row],
                 text: str, scope: str, pairs: list[PresetPair] = ()) -> str:
    from mlflow.entities import Metric, Param

    name = f"summary {sweep_id or 'all runs'}"
    run = client.create_run(experiment_id, run_name=name,
                            tags={KIND: "summary", SWEEP: sweep_id or "all", "mlflow.runName": name})
    rid = run.info.run_id
    try:
        now = int(time.time() * 1000)
        metrics = []
        def add(name: str, value: float | None) -> None:
            if value is not None:
                metrics.append(Metric(name, float(value), now, 0))

        for r in table:
            where = f"{r.team}/{r.hardware}/{r.task}"
            for mode in MODES:
                c = r.cells[mode]
                add(f"speedup/{mode}/{where}", c.geomean)
                if c.interval is not None:
                    add(f"speedup_ci_low/{mode}/{where}", c.interval.low)
                    add(f"speedup_ci_high/{mode}/{where}", c.interval.high)
            add(f"extra_over_equal/{where}", r.ratio)
            if r.paired is not None:
                add(f"extra_over_equal_ci_low/{where}", r.paired.ratio.low)
                add(f"extra_over_equal_ci_high/{where}", r.paired.ratio.high)
                add(f"extra_over_equal_p/{where}", r.paired.p_value)
        for p in pairs:
            where = f"{p.budget}/{p.b}_over_{p.a}/{p.hardware}/{p.task}"
            add(f"preset_ratio/{where}", p.paired.ratio.value)
            add(f"preset_ratio_ci_low/{where}", p.paired.ratio.low)
            add(f"preset_ratio_ci_high/{where}", p.paired.ratio.high)
            add(f"preset_ratio_p/{where}", p.paired.p_value)
        client.log_batch(rid, metrics=metrics[:1000],
                         params=[Param("runs", str(len(runs))), Param("sweep_id", sweep_id or "all"),
                                 Param("run_ids", ",".join(r.run_id for r in runs)[:500])])
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "compare.md").write_text(f"# equal vs extra budget ({scope})\n\n{text}\n")
            (folder / "compare.csv").write_text(csv_text(table))
            (folder / "runs.json").write_text(json.dumps([r.__dict__ for r in runs], indent=1))
            (folder / "pairs.json").write_text(json.dumps([{**p.__dict__, "paired": p.paired.to_json()}
                                                           for p in pairs], indent=1))
            plot_speedups(table, folder / "compare_speedup.png", f"final speedup, equal vs extra budget ({scope})")
            plot_tokens(runs, folder / "compare_speedup_vs_tokens.png", f"final speedup vs tokens ({scope})")
            plot_progress(client, runs, folder / "compare_best_vs_evaluations.png",
                          f"best speedup over the search, by seed ({scope})")
            client.log_artifacts(rid, str(folder))
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    client.set_terminated(rid, "FINISHED")
    return rid


try:  # Hydra is always there for the CLI; the callback base class is a plain class without it
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object


class SweepSummary(_HydraCallback):
    """Hydra callback: at the end of a multirun, compare the sweep's runs (equal vs extra budget per
    team preset, hardware and task) and log the summary run. Configured in conf/config.yaml."""

    def on_multirun_end(self, config, **kwargs) -> None:
        tracking = config.get("tracking")
        if tracking is None or getattr(tracking.get("backend"), "value", tracking.get("backend")) != "mlflow":
            return
        sweep = Path(str(config.hydra.sweep.dir)).name
        try:
            compare(tracking.tracking_uri, tracking.experiment, sweep_id=sweep)
        except CompareError as exc:
            print(f"evoteam: no sweep summary: {exc}", file=sys.stderr, flush=True)
        except Exception as exc:  # the jobs' results are safe in MLflow; a summary can be made later
            print(f"evoteam: no sweep summary ({type(exc).__name__}: {exc}); run python -m evoteam.compare "
                  f"--sweep-id {sweep}", file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"evoteam.compare: error: {message} (see python -m evoteam.compare --help)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m evoteam.compare",
                     description="Equal- vs extra-budget final speedups per team preset, hardware and task, "
                                 "from the evoteam runs in MLflow, each a geomean over the cell's runs with its 95% "
                                 "bootstrap interval; runs of the same seed paired (extra against equal budget, "
                                 "preset against preset) into a ratio with its interval, a permutation test's p-value "
                                 "and a verdict (better, worse or within noise). Printed, and logged as a summary run.")
    parser.add_argument("--tracking-uri", default=DEFAULT_URI, help=f"MLflow store or server (default {DEFAULT_URI})")
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="experiment name (default evoteam)")
    parser.add_argument("--sweep-id", default=None, help="only the jobs of this multirun (its sweep folder name)")
    parser.add_argument("--no-log", action="store_true", help="print the table only, log no summary run")
    args = parser.parse_args(argv)
    try:
        compare(args.tracking_uri, args.experiment, args.sweep_id, log_summary=not args.no_log)
    except UserError as exc:
        print(f"evoteam.compare: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main)
