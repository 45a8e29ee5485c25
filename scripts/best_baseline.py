"""The bar a library sets at its best: one candidate benched against several configurations of the same library
(FlashInfer's MLA decode by its fa2 and by its fa3 backend), each run measured side by side with the candidate, and
per workload the configuration the candidate fares worst against taken as the bar.

    python scripts/best_baseline.py RUN.json [RUN.json ...] [--json OUT.json]

Each RUN.json is `python -m evoteam.bench ... --json RUN.json` of the same candidate on the same workloads and timing
mode, one baseline configuration each (scripts/gpu_integrity_report.sh's part mla_best runs fa2 and fa3). A workload's
speedup against the bar is the lowest of its speedups over the runs (each a ratio measured in one run: the candidate
against the faster library configuration of that workload, the conservative pick where the two are within noise); its
interval is that run's. A workload that did not pass in every run has no figure: it counts as failed. Prints one row
per workload (the bar's configuration named), then the geomean with its 95% interval, the worst, and the count under
0.95x.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evoteam.harness.model import geomean
from evoteam.uncertainty import geomean_interval

FLOOR = 0.95  # issue 56's "no workload under" figure


def _configuration(run: dict) -> str:
    """A run's baseline as a short name: the adapter and its options (flashinfer[backend=fa3,plan=cached])."""
    request = run["request"]
    options = ",".join(f"{k}={v}" for k, v in sorted(request.get("baseline_options", {}).items()))
    return f"{request['baseline']}[{options}]" if options else request["baseline"]


def best_of(runs: dict[str, dict]) -> dict:
    """Per workload the bar (the configuration with the lowest speedup, over runs where it passed with a time), and
    the summary. `runs`: configuration name -> a bench JSON. Refuses runs of different candidates, workloads or
    timing modes: their ratios are not comparable."""
    requests = [r["request"] for r in runs.values()]
    for key in ("solution", "task", "timing_mode", "scale"):
        if len({str(q.get(key)) for q in requests}) > 1:
            raise ValueError(f"the runs differ in {key}: {sorted({str(q.get(key)) for q in requests})}; give runs "
                             f"of one candidate, task, scale and timing mode, each against one baseline configuration")
    order = [r["uuid"] for r in next(iter(runs.values()))["results"]]
    by_run = {name: {r["uuid"]: r for r in run["results"]} for name, run in runs.items()}
    if any(set(results) != set(order) for results in by_run.values()):
        raise ValueError("the runs cover different workloads; give runs of the same --workloads")
    rows = []
    for uuid in order:
        figures = {name: results[uuid] for name, results in by_run.items()}
        timed = {name: r for name, r in figures.items() if r["status"] == "PASSED" and r.get("speedup")}
        if len(timed) < len(figures):
            failed = {name: r["status"] for name, r in figures.items() if name not in timed}
            rows.append({"uuid": uuid, "bar": None, "speedup": None, "failed": failed,
                         "speedups": {name: r.get("speedup") for name, r in figures.items()}})
            continue
        bar = min(timed, key=lambda name: timed[name]["speedup"])
        rows.append({"uuid": uuid, "bar": bar, "speedup": timed[bar]["speedup"],
                     "low": timed[bar].get("speedup_low"), "high": timed[bar].get("speedup_high"),
                     "speedups": {name: r["speedup"] for name, r in timed.items()}})
    speedups = [row["speedup"] for row in rows if row["speedup"] is not None]
    interval = geomean_interval(speedups)
    worst = min((row for row in rows if row["speedup"] is not None), key=lambda row: row["speedup"], default=None)
    summary = {"workloads": len(rows), "timed": len(speedups), "geomean_speedup": geomean(speedups),
               "geomean_ci_low": interval.low, "geomean_ci_high": interval.high,
               "worst_speedup": worst["speedup"] if worst else None, "worst_workload": worst["uuid"] if worst else None,
               f"under_{FLOOR}": sum(s < FLOOR for s in speedups),
               "bars": {name: sum(row["bar"] == name for row in rows) for name in runs}}
    return {"runs": list(runs), "timing_mode": requests[0].get("timing_mode"), "rows": rows, "summary": summary}


def format_report(report: dict) -> str:
    names = report["runs"]
    lines = [f"{'workload':<10} " + " ".join(f"{n:>28}" for n in names) + f"  {'bar':>9}  speedup over the bar"]
    for row in report["rows"]:
        cells = " ".join(f"{_x(row['speedups'].get(n)):>28}" for n in names)
        if row["speedup"] is None:
            lines.append(f"{row['uuid'][:8]:<10} {cells}  {'-':>9}  failed: "
                         + ", ".join(f"{n} {s}" for n, s in row["failed"].items()))
            continue
        interval = f" [{row['low']:.3f}, {row['high']:.3f}]" if row.get("low") and row.get("high") else ""
        lines.append(f"{row['uuid'][:8]:<10} {cells}  {_short(row['bar']):>9}  {row['speedup']:.3f}x{interval}")
    s = report["summary"]
    interval = (f" [{s['geomean_ci_low']:.3f}, {s['geomean_ci_high']:.3f}]"
                if s["geomean_ci_low"] is not None and s["geomean_ci_high"] is not None else "")
    lines.append(f"against the faster configuration per workload ({report['timing_mode']}): {s['timed']}/{s['workloads']} "
                 f"timed; geomean {_x(s['geomean_speedup'])}{interval}; worst {_x(s['worst_speedup'])}"
                 f"{' (' + s['worst_workload'][:8] + ')' if s['worst_workload'] else ''}; under {FLOOR}x: "
                 f"{s[f'under_{FLOOR}']}; the bar: " + ", ".join(f"{_short(n)} {k}" for n, k in s["bars"].items()))
    return "\n".join(lines)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _short(name: str) -> str:
    """flashinfer[backend=fa3,plan=cached] -> fa3 (the option that differs is what a reader needs)."""
    for part in name.split("[", 1)[-1].rstrip("]").split(","):
        if part.startswith("backend="):
            return part.split("=", 1)[1]
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench JSON files, one per baseline configuration")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    runs = {}
    for path in args.runs:
        try:
            run = json.loads(path.read_text())
            name = _configuration(run)
        except (OSError, ValueError, KeyError) as exc:
            print(f"best_baseline: {path} is not a bench JSON ({exc}); give `python -m evoteam.bench ... --json` "
                  f"files", file=sys.stderr)
            return 2
        if name in runs:
            print(f"best_baseline: two runs against {name}; give one run per baseline configuration", file=sys.stderr)
            return 2
        runs[name] = run
    try:
        report = best_of(runs)
    except ValueError as exc:
        print(f"best_baseline: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
