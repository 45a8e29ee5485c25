"""Sweep a kernel family's space with the harness, and turn the results into a per-shape dispatch.

    python -m evoteam.sweep --task mla_decode --family flashdecode --out sweep.json \\
        [--space '{"num_warps": [4, 8]}'] [--shard 1/2] [--workloads PREFIX ...] \\
        [--emit-champion kernels/mla_decode/champion_h200.json] [--emit-kernel champion.py]
    python -m evoteam.sweep --task mla_decode --family flashdecode --merge a.json b.json --out all.json ...
    python -m evoteam.sweep --build kernels/mla_decode/champion_h200.json --emit-kernel champion.py

Every point of the space (the family's, from families.json, or --space: a JSON object of lists that
replaces those keys of the family's space) is written to a temporary file (the family's file with
PARAMS rewritten and a module-level DISPATCH literal, if any, emptied, so the point applies to every
shape) and evaluated like `python -m evoteam.bench` does: one evaluation by the harness per point
(evoteam.harness.executor.evaluate: the judge, the point in its sandboxed runner), the correctness
checker on every workload, then the baseline and the candidate timed side by side. By default the baseline's time is taken from the
baseline cache where it holds one (the first point that times a workload fills it): --time-baseline
times it side by side at every point. Reports must time both side by side (python -m evoteam.bench).

--out gets one JSON: per point, per workload, status, speedup, candidate and baseline times, noise.
Printed: one line per point (passed, geomean, worst, wall time), the best point per workload, the
best single point (highest geomean among the points that pass everywhere) and the geomean of the
per-workload choice. --emit-champion writes the choice as a champion file (evoteam.families.Champion:
the family, PARAMS = the best single point, DISPATCH = [[axes, params], ...] with the workload's
--dispatch-axes), the committed form of a chosen kernel; --emit-kernel writes the runnable candidate
it builds (the family's file with PARAMS and DISPATCH set; its run() must read DISPATCH). --build
CHAMPION.json builds a committed champion's candidate (with --emit-kernel), evaluating nothing. --smooth K scores a point on a workload by the geometric mean of its speedups on the
workload and its K neighbours on each side along the last dispatch axis among workloads with equal
other axes: one noisy measurement then decides less.

--shard I/N evaluates every N-th point from the I-th (to split a sweep over several calls); --merge
joins the JSON files of several shards (or runs) into one and analyses that, evaluating nothing.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
import time
from pathlib import Path

from evoteam.errors import UserError, exit_code_of
from evoteam.families import DISPATCH_NAME, Champion, _assignment, apply_params, load_champion, set_literal
from evoteam.harness.model import TIMING_MODES, Status, TimingMode, geomean


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evoteam.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--task", help="a task of kernels/ (needed unless --build)")
    p.add_argument("--family", help="a family name of kernels/<task>/families.json (needed unless --build)")
    p.add_argument("--build", type=Path, metavar="CHAMPION_JSON",
                   help="build this champion file's candidate (with --emit-kernel); evaluate nothing")
    p.add_argument("--space", help="JSON object of lists replacing those keys of the family's space")
    p.add_argument("--points", help="JSON list of points (merged over the family's default) instead of a space")
    p.add_argument("--shard", default="1/1", help="I/N: evaluate points I-1, I-1+N, ... (default 1/1: all)")
    p.add_argument("--max-points", type=int, help="refuse to run a space larger than this")
    p.add_argument("--list", action="store_true", help="print the points and exit")
    p.add_argument("--hardware", default="auto")
    p.add_argument("--scale", choices=["full", "small"])
    p.add_argument("--workloads", nargs="*", default=[], help="unique uuid prefixes (default: all)")
    p.add_argument("--baseline", default="auto")
    p.add_argument("--baseline-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--timing", choices=list(TIMING_MODES), default=TimingMode.graph.value)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--warmup", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--timeout", type=float, default=300, help="seconds per workload before a worker is killed")
    p.add_argument("--sandbox", choices=["strict", "weak"], default="strict",
                   help="the candidate's sandbox: strict refuses to run where a layer is missing")
    p.add_argument("--time-baseline", action="store_true",
                   help="time the baseline side by side at every point (default: baseline cache where it has one)")
    p.add_argument("--out", type=Path, help="write the sweep's JSON here")
    p.add_argument("--merge", nargs="+", type=Path, help="analyse these sweep JSON files together; evaluate nothing")
    p.add_argument("--override", action="store_true",
                   help="with --merge: each later file's workloads are chosen from its own points only "
                        "(needed to merge sweeps of different timing modes)")
    p.add_argument("--dispatch-axes", help="comma-separated workload axes a dispatch entry keys on "
                                           "(default: the var axes of the task's definition)")
    p.add_argument("--smooth", type=int, default=1, help="neighbours on each side that a choice also looks at")
    p.add_argument("--emit-champion", type=Path, help="write the choice as a champion file (family, PARAMS, DISPATCH)")
    p.add_argument("--emit-kernel", type=Path, help="write the candidate the choice builds (the family's file with "
                                                     "PARAMS and DISPATCH set)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- points and sources


def family_points(family, space_json: str | None, points_json: str | None) -> list[dict]:
    if points_json:
        points = [{**family.default, **p} for p in json.loads(points_json)]
    else:
        space = dict(family.space)
        if space_json:
            override = json.loads(space_json)
            unknown = set(override) - set(space)
            if unknown:
                raise UserError(f"--space names parameters the family does not have: {sorted(unknown)}")
            space.update({k: list(v) for k, v in override.items()})
        import itertools

        keys = list(space)
        points = [dict(zip(keys, values)) for values in itertools.product(*(space[k] for k in keys))]
    unknown = {k for p in points for k in p} - set(family.default)
    if unknown:
        raise UserError(f"points name parameters the family does not have: {sorted(unknown)}")
    return points


def point_source(family, point: dict) -> str:
    """The family's file at `point`, with DISPATCH (if the file has one) emptied."""
    source = family.source(point) if family.contains({**family.default, **point}) else _outside_space(family, point)
    if _assignment(ast.parse(source), DISPATCH_NAME, str(family.path)) is not None:
        source = set_literal(source, DISPATCH_NAME, [])
    return source


def _outside_space(family, point: dict) -> str:
    """A point off the family's listed space (from --space or --points): PARAMS rewritten all the same."""
    return apply_params(family.path.read_text(), point)


# --------------------------------------------------------------------------- evaluation


def evaluate_points(args, family, points: list[dict]) -> dict:
    from evoteam.harness.executor import evaluate
    from evoteam.target import Target, baseline_options

    target = Target.resolve(args.task, args.hardware, scale=args.scale, workloads=args.workloads,
                            timing_mode=args.timing)
    task, hw, workloads = target.task, target.hw, target.workloads
    seed = args.seed  # None: a fresh secret per evaluation

    def request(path: Path):
        return target.request(path, trials=args.trials, seed=seed, baseline=args.baseline,
                              baseline_options=sweep["baseline_options"], warmup=args.warmup, reps=args.reps,
                              use_baseline_cache=not args.time_baseline, second_figure=False, sandbox=args.sandbox)

    sweep = {"task": task.name, "family": family.name, "hardware": hw.name, "scale": target.scale,
             "baseline": args.baseline, "baseline_options": baseline_options(args.baseline_option),
             "timing": target.timing_mode, "seed": seed, "bandwidth_ceiling_tbs": hw.bandwidth_ceiling_tbs,
             "workloads": {w.uuid: {"label": label, "axes": dict(w.axes)}
                           for w, label in zip(workloads, target.labels.values())},
             "points": []}
    rounds = request("")
    sweep["warmup"], sweep["reps"] = rounds.warmup, rounds.reps
    print(f"sweep: {family.name} on {target.describe()}: {len(points)} points; baseline {args.baseline} "
          f"{sweep['baseline_options'] or ''}; seed {'secret' if seed is None else seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        for i, point in enumerate(points):
            path = Path(tmp) / f"{family.path.stem}_p{i}.py"
            path.write_text(point_source(family, point))
            request_i = request(path)
            t0 = time.monotonic()

            def progress(result, t0=t0, i=i):  # one line per workload: a slow or hung point shows where
                print(f"[point {i + 1}/{len(points)}, {time.monotonic() - t0:.0f} s] {result.uuid[:8]}: {result.status}"
                      + (f" {result.speedup:.3f}x" if result.speedup else ""), flush=True)

            outcome = evaluate(request_i, timeout_s=args.timeout, on_result=progress)
            wall = time.monotonic() - t0
            results = {r.uuid: {"status": r.status, "speedup": r.speedup, "candidate_ms": r.candidate_ms,
                                "baseline_ms": r.baseline_ms, "baseline": r.baseline, "noise": r.noise,
                                "bandwidth_tbs": r.bandwidth_tbs, "detail": r.detail[:300] if r.status != Status.PASSED else ""}
                       for r in outcome.results}
            entry = {"params": point, "results": results, "wall_s": round(wall, 1)}
            sweep["points"].append(entry)
            print(point_line(entry, len(workloads)), flush=True)
            if args.out:  # after every point: a killed sweep keeps what it measured
                args.out.write_text(json.dumps(sweep, indent=1))
    return sweep


# --------------------------------------------------------------------------- analysis


def point_summary(entry: dict, n_workloads: int) -> dict:
    ok = [r["speedup"] for r in entry["results"].values() if r["status"] == Status.PASSED and r["speedup"]]
    passed = sum(r["status"] == Status.PASSED for r in entry["results"].values())
    return {"passed": passed, "timed": len(ok), "geomean": geomean(ok), "worst": min(ok) if ok else None,
            "complete": passed == n_workloads and len(ok) == n_workloads}


def _params_text(params: dict, default: dict | None = None) -> str:
    shown = {k: v for k, v in params.items() if default is None or default.get(k) != v}
    return json.dumps(shown, separators=(",", ":")) if shown else "(default)"


def point_line(entry: dict, n_workloads: int, default: dict | None = None) -> str:
    s = point_summary(entry, n_workloads)

    def fmt(v):
        return "-" if v is None else f"{v:.3f}x"

    failures = sorted({r["status"] for r in entry["results"].values() if r["status"] != Status.PASSED})
    return (f"  {s['passed']}/{n_workloads} passed, geomean {fmt(s['geomean'])}, worst {fmt(s['worst'])}, "
            f"{entry.get('wall_s', 0):.0f} s{' ' + ','.join(failures) if failures else ''}: "
            f"{_params_text(entry['params'], default)}")


def merge_sweeps(paths: list[Path], override: bool = False) -> dict:
    """The points of several sweeps as one. Speedups of different timing modes do not compare, so
    mixing them needs override: then a later file's workloads are chosen from its own points only
    (the earlier files' results on those workloads are dropped), e.g. batch 1 re-swept with events
    on top of a graph-timed sweep of every workload."""
    sweeps = _read_sweeps(paths)
    merged = dict(sweeps[0])
    merged["points"] = []
    merged["workloads"] = {}
    modes = []
    for path, s in zip(paths, sweeps):
        if (s["task"], s["family"]) != (merged["task"], merged["family"]):
            raise UserError(f"cannot merge sweeps of {s['task']}/{s['family']} and {merged['task']}/{merged['family']}")
        if s["timing"] != merged["timing"] and not override:
            raise UserError(f"cannot merge {path} (timing {s['timing']}) with a {merged['timing']} sweep: their "
                             "speedups do not compare; give --override to choose its workloads from its points only")
        if override:
            for entry in merged["points"]:
                entry["results"] = {u: r for u, r in entry["results"].items() if u not in s["workloads"]}
        modes += [s["timing"]] if s["timing"] not in modes else []
        merged["workloads"].update(s["workloads"])
        merged["points"].extend(s["points"])
    merged["timing"] = "+".join(modes)
    return merged


def neighbours(sweep: dict, axes: list[str], k: int) -> dict[str, list[str]]:
    """uuid -> itself and up to k workloads on each side along the last axis, among equal other axes."""
    groups: dict[tuple, list[str]] = {}
    for uuid, w in sweep["workloads"].items():
        groups.setdefault(tuple(w["axes"].get(a) for a in axes[:-1]), []).append(uuid)
    out = {}
    for members in groups.values():
        members.sort(key=lambda u: (sweep["workloads"][u]["axes"].get(axes[-1]) or 0, u))
        for i, uuid in enumerate(members):
            out[uuid] = members[max(0, i - k): i + k + 1]
    return out


def choose(sweep: dict, axes: list[str], smooth: int) -> dict[str, int | None]:
    """uuid -> index of the chosen point: the best smoothed score among points that passed there."""
    near = neighbours(sweep, axes, smooth)
    chosen: dict[str, int | None] = {}
    for uuid in sweep["workloads"]:
        best, best_score = None, 0.0
        for i, entry in enumerate(sweep["points"]):
            r = entry["results"].get(uuid)
            if not r or r["status"] != Status.PASSED or not r["speedup"]:
                continue
            around = [entry["results"].get(u) for u in near.get(uuid, [uuid])]
            around = [x["speedup"] for x in around if x and x["status"] == Status.PASSED and x["speedup"]]
            score = geomean(around) or r["speedup"]
            if score > best_score:
                best, best_score = i, score
        chosen[uuid] = best
    return chosen


def analyse(sweep: dict, family, args) -> dict:
    n = len(sweep["workloads"])
    points = sweep["points"]
    if not points:
        raise UserError("the sweep holds no points")
    axes = args.dispatch_axes.split(",") if args.dispatch_axes else _var_axes(sweep["task"])
    print(f"\n{len(points)} points over {n} workloads ({sweep['hardware']}, baseline {sweep['baseline']} "
          f"{sweep.get('baseline_options') or ''}, timing {sweep['timing']}):")
    for entry in points:
        print(point_line(entry, n, family.default))
    complete = [(i, point_summary(e, n)) for i, e in enumerate(points) if point_summary(e, n)["complete"]]
    best_single = max(complete, key=lambda x: x[1]["geomean"])[0] if complete else None
    chosen = choose(sweep, axes, args.smooth)
    print(f"\nbest point per workload (smoothing {args.smooth} neighbour(s) each side along {axes[-1]}):")
    print(f"  {'workload':8}  {'shape':38} {'best':>7} {'chosen':>7} {'single':>7}  chosen point")
    picked = []
    for uuid, w in sorted(sweep["workloads"].items(), key=lambda kv: tuple(kv[1]["axes"].get(a) or 0 for a in axes)):
        speeds = [(e["results"].get(uuid) or {}).get("speedup") or 0.0 for e in points]
        i = chosen[uuid]
        single = speeds[best_single] if best_single is not None else 0.0
        picked.append(speeds[i] if i is not None else None)
        print(f"  {uuid[:8]}  {w['label'][:38]:38} {max(speeds):6.3f}x "
              f"{(speeds[i] if i is not None else 0.0):6.3f}x {single:6.3f}x  "
              f"{_params_text(points[i]['params'], family.default) if i is not None else 'NONE PASSED'}")
    if best_single is not None:
        s = point_summary(points[best_single], n)
        print(f"\nbest single point: geomean {s['geomean']:.3f}x, worst {s['worst']:.3f}x: "
              f"{json.dumps(points[best_single]['params'])}")
    else:
        print("\nbest single point: none passed every workload")
    if all(p is not None for p in picked):
        print(f"per-workload choice: geomean {geomean(picked):.3f}x, worst {min(picked):.3f}x "
              f"(measured in the sweep itself: optimistic; time the dispatched kernel side by side)")
    table = [[{a: sweep["workloads"][u]["axes"].get(a) for a in axes}, points[i]["params"]]
             for u, i in sorted(chosen.items(), key=lambda kv: tuple(sweep["workloads"][kv[0]]["axes"].get(a) or 0
                                                                         for a in axes)) if i is not None]
    return {"best_single": points[best_single]["params"] if best_single is not None else None, "dispatch": table}


def _var_axes(task_name: str) -> list[str]:
    from evoteam.task import load_task

    axes = load_task(task_name).definition.axes
    return [k for k, a in axes.items() if a.type == "var"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return exit_code_of("evoteam.sweep", lambda: run(args))


def _read_sweeps(paths: list[Path]) -> list[dict]:
    out = []
    for path in paths:
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"--merge {path}: not a readable sweep JSON ({exc})") from None
    return out


def run(args: argparse.Namespace) -> int:
    if args.build:
        if not args.emit_kernel:
            raise UserError("--build needs --emit-kernel PATH (where the built candidate goes)")
        try:
            champion = load_champion(args.build)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        args.emit_kernel.write_text(champion.source())
        print(f"{args.emit_kernel}: family {champion.family.name} with PARAMS and DISPATCH of {args.build}")
        return 0
    if not args.task or not args.family:
        raise UserError("give --task and --family (or --build CHAMPION_JSON)")
    from evoteam.families import load_families
    from evoteam.task import available_tasks

    if args.task not in available_tasks():
        raise UserError(f"--task {args.task} is not a known task; allowed: {', '.join(available_tasks())}")
    families = {f.name: f for f in load_families(args.task)}
    if args.family not in families:
        raise UserError(f"task {args.task} has no family {args.family!r}; it has {sorted(families)}")
    family = families[args.family]
    if args.merge:
        sweep = merge_sweeps(args.merge, args.override)
        if args.out:
            args.out.write_text(json.dumps(sweep, indent=1))
    else:
        points = family_points(family, args.space, args.points)
        try:
            index, count = (int(x) for x in args.shard.split("/"))
        except ValueError:
            index = count = 0
        if not 1 <= index <= count:
            raise UserError(f"--shard {args.shard}: want I/N with 1 <= I <= N")
        points = points[index - 1::count]
        if args.max_points and len(points) > args.max_points:
            raise UserError(f"{len(points)} points > --max-points {args.max_points}")
        if args.list:
            for p in points:
                print(json.dumps(p))
            return 0
        sweep = evaluate_points(args, family, points)
    result = analyse(sweep, family, args)
    champion = Champion(task=args.task, family=family, hardware=sweep["hardware"], params=result["best_single"] or {},
                        dispatch=result["dispatch"], made_by="python -m evoteam.sweep " + " ".join(sys.argv[1:]))
    if args.emit_champion:
        args.emit_champion.write_text(champion.to_text())
        print(f"champion ({len(champion.dispatch)} table entries) written to {args.emit_champion}; "
              f"build it: python -m evoteam.sweep --build {args.emit_champion} --emit-kernel CANDIDATE.py")
    if args.emit_kernel:
        args.emit_kernel.write_text(champion.source())
        print(f"kernel with PARAMS = best single point and DISPATCH written to {args.emit_kernel}")
    return 0


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main)
