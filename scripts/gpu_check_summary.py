"""The table of scripts/gpu_check.sh: one row per check, whether it holds, and the figures behind it, read from the
parts' outputs in OUT. Writes OUT/summary.md (the table first, then each row's detail) and prints it; exit status 0
only if every row of the parts that ran holds (a part that did not run is a row that does not hold).

    python3 scripts/gpu_check_summary.py OUT --parts controls redteam kda aa mla mainjob [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

AA_BOUND = 0.03  # the A/A control's geomean within 3% of 1.00x
MLA_PASSED_AT_LEAST = 46  # of 47: FlashInfer's own output has missed the tolerance on one element once (a128f96f)


@dataclass
class Row:
    check: str
    holds: bool
    figures: str
    detail: list[str] = field(default_factory=list)


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def _results_line(r: dict) -> str:
    second = r.get("second") or {}
    events = ""
    if second.get("baseline_ms") and second.get("candidate_ms"):
        events = f"; events {second['baseline_ms'] / second['candidate_ms']:.3f}x"
    noise = f", noise {100 * r['noise']:.1f}%" if r.get("noise") is not None else ""
    return (f"{r['uuid'][:8]}: {r['status']} {_fmt(r.get('speedup'))}x by {r.get('timing_mode') or '-'} "
            f"(candidate {_fmt(r.get('candidate_ms'), '.4f')} ms, baseline {_fmt(r.get('baseline_ms'), '.4f')} ms"
            f"{noise}{events}, {r.get('spread', {}).get('calls_per_batch', '-')} calls a batch)"
            + (f" - {r['detail'][:200]}" if r["status"] != "PASSED" else ""))


def _planned_cases(log: Path) -> int | None:
    """The number of cases tests/redteam/run.py set out to run (its first line: "red team: N cases on ...")."""
    try:
        first = log.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    words = first.split()
    return int(words[2]) if first.startswith("red team: ") and len(words) > 2 and words[2].isdigit() else None


def redteam_rows(out: Path, name: str, title: str) -> list[Row]:
    rows = _load(out / f"{name}.json")
    if not rows:
        return [Row(title, False, f"no result ({name}.log)")]
    # a part cut at its limit has written the cases it finished: all of them caught is not the part holding
    # (2026-12-06: 12 of 14 reached, and the row read as if only 12 had been asked for)
    planned = _planned_cases(out / f"{name}.log")
    caught = [r for r in rows if r["caught"]]
    detail = [f"{r['case']} ({r['expect']}): {'/'.join(r['statuses'])}; candidate ms "
              f"{', '.join('-' if t is None else f'{t:.4f}' for t in r['candidate_ms'])}; speedups "
              f"{', '.join(_fmt(x) + 'x' for x in r.get('speedups', []))} "
              f"({', '.join(m.split(' ')[0] for m in r.get('modes', []) if m) or '-'}; events beside: "
              f"{', '.join(_fmt(x) + 'x' for x in r.get('second', [])) or '-'}); "
              f"{'caught' if r['caught'] else 'LEAK'}: {r['why']}" for r in rows]
    part = (out / "redteam_part.txt").read_text().strip() if (out / "redteam_part.txt").exists() else ""
    figures = f"{len(caught)}/{len(rows)} as expected" + (f" (part {part} of the rest)" if name == "redteam" else "")
    reached = planned is None or len(rows) >= planned
    if not reached:
        figures += f"; only {len(rows)} of the {planned} cases reached (the part was cut: see {name}.log)"
    return [Row(title, len(caught) == len(rows) and reached, figures, detail)]


def bench_row(out: Path, names: list[str], title: str, *, aa: bool = False, at_least: int | None = None) -> Row:
    detail, results = [], []
    for name in names:
        report = _load(out / f"{name}.json")
        if report is None:
            return Row(title, False, f"no result ({name}.json missing: see the part's log)")
        results += report["results"]
        detail += [f"{name}: {_results_line(r)}" for r in report["results"]]
    passed = [r for r in results if r["status"] == "PASSED" and r.get("speedup")]
    mean = _geomean(r["speedup"] for r in passed)
    needed = len(results) if at_least is None else min(at_least, len(results))
    holds = len(passed) >= needed and bool(results)
    if aa:
        holds = holds and mean is not None and abs(mean - 1.0) <= AA_BOUND
    events = _geomean(r["second"]["baseline_ms"] / r["second"]["candidate_ms"] for r in passed
                      if (r.get("second") or {}).get("candidate_ms"))
    figures = (f"{len(passed)}/{len(results)} PASSED, geomean {_fmt(mean)}x"
               + (f" (events beside it {_fmt(events)}x)" if events else "")
               + (f" (within {100 * AA_BOUND:g}% of 1.00x: {'yes' if holds else 'no'})" if aa else ""))
    return Row(title, holds, figures, detail)


def mainjob_row(out: Path) -> Row:
    log = (out / "mainjob.log").read_text(errors="replace") if (out / "mainjob.log").exists() else ""
    walls = {line.split()[0]: line.split()[1:] for line in (out / "walls.txt").read_text().splitlines()} \
        if (out / "walls.txt").exists() else {}
    code = walls.get("mainjob", ["?"])[0]
    db = out / "mlflow.db"
    runs, metrics = 0, {}
    if db.exists():
        with sqlite3.connect(db) as con:
            runs = con.execute("select count(*) from runs").fetchone()[0]
            metrics = dict(con.execute("select key, max(value) from metrics group by key").fetchall())
    final = {k: v for k, v in metrics.items() if k.startswith("final")}
    holds = code == "0" and runs >= 1 and bool(final)
    figures = (f"exit {code}; {runs} MLflow run(s) in {db.name}; "
               + ", ".join(f"{k} {v:.3f}" for k, v in sorted(final.items())[:3]))
    tail = [line for line in log.splitlines() if line.strip()][-8:]
    return Row("main job, two evaluations, tracked in MLflow", holds, figures, tail)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--parts", nargs="*", default=["controls", "redteam", "kda", "aa", "mla", "mainjob"])
    p.add_argument("--seconds", type=int)
    args = p.parse_args(argv)
    out = args.out
    rows: list[Row] = []
    for part in args.parts:
        if part == "controls":
            rows += redteam_rows(out, "controls", "MLA honest candidates PASSED with a number (graph, events beside)")
        elif part == "redteam":
            rows += redteam_rows(out, "redteam", "GPU red team: every cheat caught")
        elif part == "kda":
            rows.append(bench_row(out, ["kda_chunk", "kda_seed"], "KDA honest candidates (Triton) vs fla"))
        elif part == "aa":
            rows.append(bench_row(out, ["aa_mla"], "A/A control, MLA champion on 8 workloads", aa=True))
            rows.append(bench_row(out, ["aa_kda"], "A/A control, KDA chunk kernel on 2 workloads", aa=True))
        elif part == "mla":
            rows.append(bench_row(out, ["mla_graph"], "MLA champion vs FlashInfer, 47 workloads, graph",
                                  at_least=MLA_PASSED_AT_LEAST))
            rows.append(bench_row(out, ["mla_events"], "MLA champion vs FlashInfer, 47 workloads, events",
                                  at_least=MLA_PASSED_AT_LEAST))
        elif part == "mainjob":
            rows.append(mainjob_row(out))
    machine = (out / "machine.txt").read_text().strip().splitlines() if (out / "machine.txt").exists() else []
    walls = [w.split() for w in (out / "walls.txt").read_text().splitlines() if len(w.split()) == 3] \
        if (out / "walls.txt").exists() else []
    lines = ["| check | holds | figures |", "| --- | --- | --- |"]
    lines += [f"| {r.check} | {'yes' if r.holds else '**NO**'} | {r.figures} |" for r in rows]
    text = "\n".join(["# gpu_check", "", *lines, "",
                      f"{machine[0] if machine else 'machine unknown'}; "
                      f"{machine[2] if len(machine) > 2 else ''}; "
                      f"{args.seconds if args.seconds is not None else '?'} s in all "
                      f"(parts: {', '.join(f'{name} {sec} s, exit {rc}' for name, rc, sec in walls)})",
                      "", *[f"## {r.check}\n" + "\n".join(f"- {d}" for d in r.detail) for r in rows if r.detail]])
    (out / "summary.md").write_text(text + "\n")
    print(text)
    return 0 if rows and all(r.holds for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
