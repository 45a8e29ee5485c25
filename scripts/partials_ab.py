"""Which dtype each MLA shape's partial outputs should take (the flashdecode family's PARTIALS), decided by an A/B on
a GPU: the champion with "fp16" everywhere against itself with "fp32" everywhere, side by side in one evaluation,
every workload checked.

    python scripts/partials_ab.py build OUTDIR [--champion FILE]       # OUTDIR/fp16.py and OUTDIR/fp32.py
    # on the GPU (graph replay; each workload's shape is one entry of the champion's table):
    python3 -m evoteam.bench OUTDIR/fp16.py --task mla_decode --baseline solution \\
        --baseline-option path=OUTDIR/fp32.py --timing graph --json AB.json
    python scripts/partials_ab.py choose AB.json [--champion FILE] [--margin 0.01]

`choose` rewrites the champion file's table: an entry takes "fp16" where every workload of its shape PASSED and the
geomean of their speedups (fp32's time over fp16's) is at least 1 + MARGIN, else "fp32", the exact one: a tie goes to
precision. Why it is a choice per shape: on an H100 (2026-12-06) fp16 was 1.3-2.3% faster on two batch-64 shapes and
8% slower on a batch-1 request cut into 85 pieces (kernels/mla_decode/DESIGN.md, section 6.10).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHAMPION = ROOT / "kernels/mla_decode/champion_h200.json"
VALUES = ("fp16", "fp32")


def with_partials(champion, value: str):
    """The champion with PARTIALS `value` in its params and in every entry of its table."""
    dispatch = [[keys, {**point, "PARTIALS": value}] for keys, point in champion.dispatch]
    return dataclasses.replace(champion, params={**champion.params, "PARTIALS": value}, dispatch=dispatch)


def build(champion, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for value in VALUES:
        path = folder / f"{value}.py"
        path.write_text(with_partials(champion, value).source())
        paths.append(path)
    return paths


def choose(champion, results: list[dict], workloads: list, margin: float):
    """(the champion with each entry's PARTIALS chosen, {value: entries}); entries no workload of the A/B matches keep
    their value."""
    by_uuid = {r["uuid"]: r for r in results}
    dispatch, counts = [], dict.fromkeys(VALUES, 0)
    for keys, point in champion.dispatch:
        mine = [by_uuid[w.uuid] for w in workloads
                if w.uuid in by_uuid and all(w.axes.get(k) == v for k, v in keys.items())]
        if mine:
            passed = all(r["status"] == "PASSED" and r.get("speedup") for r in mine)
            geomean = math.exp(sum(math.log(r["speedup"]) for r in mine) / len(mine)) if passed else 0.0
            point = {**point, "PARTIALS": "fp16" if geomean >= 1.0 + margin else "fp32"}
        counts[{**champion.family.default, **champion.params, **point}["PARTIALS"]] += 1
        dispatch.append([keys, point])
    return dataclasses.replace(champion, dispatch=dispatch), counts


def main(argv: list[str] | None = None) -> int:
    from evoteam.families import load_champion
    from evoteam.task import load_task

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write OUTDIR/fp16.py and OUTDIR/fp32.py")
    b.add_argument("outdir", type=Path)
    c = sub.add_parser("choose", help="rewrite the champion's PARTIALS per entry from an A/B report")
    c.add_argument("report", type=Path, help="evoteam.bench's --json of fp16.py against fp32.py")
    c.add_argument("--margin", type=float, default=0.01)
    for sp in (b, c):
        sp.add_argument("--champion", type=Path, default=CHAMPION)
    args = p.parse_args(argv)
    try:
        champion = load_champion(args.champion)
    except ValueError as exc:
        print(f"partials_ab: {exc}", file=sys.stderr)
        return 2
    if args.command == "build":
        for path in build(champion, args.outdir):
            print(path)
        return 0
    try:
        report = json.loads(args.report.read_text())
        results = report["results"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"partials_ab: {args.report} is not an evoteam.bench report ({exc}); give the file --json wrote",
              file=sys.stderr)
        return 2
    chosen, counts = choose(champion, results, load_task(champion.task).workloads, args.margin)
    chosen = dataclasses.replace(chosen, made_by=f"{champion.made_by}; PARTIALS per entry by scripts/partials_ab.py "
                                                 f"choose {args.report.name} (margin {args.margin:g})")
    args.champion.write_text(chosen.to_text())
    print(f"{args.champion}: PARTIALS fp16 on {counts['fp16']} entries, fp32 on {counts['fp32']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
