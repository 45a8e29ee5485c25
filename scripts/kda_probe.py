"""Where a KDA prefill kernel's time goes on a GPU: device time per launch (profiler), CUDA events
around one call (the harness's mode), graph replay, host time of one call, the compiled kernels'
registers, spills and shared memory; optionally library baselines next to it (fla's chunk_kda, FlashKDA: their
per-launch kernel names show which library code really ran) and errors against the reference. For the design note's prediction-versus-measurement table; not a verdict (use evoteam.bench).

    python scripts/kda_probe.py [KERNEL.py] [--points '[{}, {"BV": 16}]'] [--workloads PREFIX ...]
                                [--baseline fla --baseline flashkda] [--check] [--ablate MASK ...] [--json OUT.json]

For each point (PARAMS overrides of the kernel file; default: the file as it is) and workload, on
fresh random inputs (the task's make_inputs):
  host_us     median host time of one call, launches queued behind a busy GPU (no sync inside)
  events_us   CUDA events around one call after an L2 flush (what the harness times)
  graph_us    graph replay of 20 x [flush, call] minus the flushes, per call (device time only)
  per launch  device time of each kernel of one call (torch.profiler, median over calls)
  floor_us    compulsory bytes (task.min_bytes) / the copy ceiling of the hardware spec sheet
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# 1k x 32 heads; 16k x 8 heads and 16k x 32 heads (both gates), one sequence; 8 x 2048 x 8 heads;
# 8 mixed sequences x 32 heads; 7 mixed x 8 heads
DEFAULT_WORKLOADS = ["15208288", "b9321a1b", "df87a189", "1476db7b", "0663b73b", "735d7f72", "17ae6ae2"]


def kernel_times(fn, device, calls: int = 5) -> dict[str, float]:
    """Device time (us) per call of each kernel name: the sum over `calls` calls, divided by `calls` (profiler). A
    kernel launched several times a call (the runs of `segments`) counts all its launches; overlapping launches on
    two streams each count in full, so the sum may exceed the call's time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(0)
        torch.cuda.synchronize()
    per: dict[str, list[float]] = {}
    for ev in prof.events():
        if str(ev.device_type).endswith("CUDA"):
            t = ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            per.setdefault(ev.name, []).append(t)
    return {name: sum(v) / calls for name, v in per.items()}


def main(argv: list[str] | None = None) -> int:
    import probes  # scripts/probes.py, beside this script

    p = probes.parser(__doc__.splitlines()[0], DEFAULT_WORKLOADS, reps=20)
    p.add_argument("kernel", nargs="?", default=str(ROOT / "kernels/kda_prefill/chunk_triton.py"))
    p.add_argument("--baseline", action="append", default=[],
                   help="time a baseline adapter too (repeatable): fla (the first call per shape autotunes), flashkda")
    p.add_argument("--check", action="store_true", help="errors against the fp32 reference (slow on long sequences)")
    p.add_argument("--require-own-kernels", action="store_true",
                   help="exit 1 unless every --baseline's own kernels (its adapter's kernel_names) are in the profile "
                        "of each workload it ran: the proof that the library itself ran, not a fallback")
    p.add_argument("--ablate", action="append", type=int, default=[],
                   help="also time each point with these intra-pass stages left out (the kernel's ABLATE bit mask; "
                        "repeatable): differences of times place the pass's time without hardware counters; the "
                        "output of such a variant is wrong by design")
    p.add_argument("--stop-after", type=float, default=0,
                   help="start no new workload after this many seconds (the JSON and champion keep what was probed)")
    p.add_argument("--rows-from", type=Path,
                   help="measure nothing: take the rows of an earlier probe's --json (with --emit-champion; no GPU needed)")
    p.add_argument("--emit-champion", type=Path,
                   help="write a champion file (kernels/kda_prefill/champion_<hw>.json form) whose dispatch runs, on each "
                        "probed workload's shape, the point with the least graph-replay device time (ablated variants "
                        "never count); the probe checks nothing: verify it with evoteam.bench before committing it")
    p.add_argument("--keep-from", type=Path,
                   help="with --emit-champion: the shapes this probe gives no entry keep theirs from this champion file "
                        "(e.g. probe new points on the single sequences only, keep the committed batches' choices)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    probes.arm_deadline(args.deadline)

    if args.rows_from:
        return emit_from_rows(args)

    import torch

    from evoteam import hardware
    from evoteam.families import load_variants
    from evoteam.harness import baselines, timing
    from evoteam.task import load_task, select_workloads, shape_label

    hw = hardware.resolve("auto")
    task = load_task("kda_prefill")
    workloads = select_workloads(task.scaled_workloads("full"), args.workloads)
    device = hw.torch_device
    points = json.loads(args.points)
    masks = [0, *args.ablate]
    variants = load_variants(Path(args.kernel), [point for point in points for _ in masks],
                             Path(tempfile.mkdtemp(prefix="kda-probe-")), "kda_probe")
    modules = {}
    unablated = {}  # name -> point, the variants that are points of the family (not ablations)
    for i, (point, module) in enumerate(variants):
        mask = masks[i % len(masks)]
        name = json.dumps(point, separators=(",", ":"))
        if mask:
            module.ABLATE = mask  # read when the module makes its first plan
            name += f" ablate={mask}"
        else:
            unablated[name] = point
        modules[name] = module
    libraries = {}
    for name in args.baseline:
        try:
            libraries[name] = baselines.create(name, task, hw)
        except Exception as exc:  # noqa: BLE001
            print(f"{name} unavailable: {exc}")
    print(f"{hw.name}: copy ceiling {hw.bandwidth_ceiling_tbs} TB/s; {torch.cuda.get_device_name()}; "
          f"torch {torch.__version__}", flush=True)

    rows = []
    resources = {}
    unproven = 0  # library rows whose profile lacks their own kernels
    started = time.perf_counter()
    for n_done, w in enumerate(workloads):
        if args.stop_after and time.perf_counter() - started > args.stop_after:
            print(f"stopping after {args.stop_after:.0f} s: {len(workloads) - n_done} workload(s) not probed", flush=True)
            break
        gen = torch.Generator(device=device)
        gen.manual_seed(1234)
        inputs = task.make_inputs(w, gen, device)
        shapes = task.output_shapes(w, inputs)
        floor_us = task.min_bytes(w, inputs) / ((hw.bandwidth_ceiling_tbs or 1.0) * 1e12) * 1e6
        ref = task.reference(inputs) if args.check else None
        callables = {}
        outs = {}

        def new_outs(shapes=shapes):
            return {"output": torch.empty(shapes["output"], dtype=torch.bfloat16, device=device),
                    "final_state": torch.empty(shapes["final_state"], dtype=torch.float32, device=device)}

        for name, mod in modules.items():
            outs[name] = new_outs()
            callables[name] = (lambda i, mod=mod, o=outs[name], inp=inputs: mod.run(**inp, **o))
        for name, library in libraries.items():
            try:
                run_library = library.prepare(task, w, inputs)
            except baselines.BaselineUnavailable as exc:
                print(f"{w.uuid[:8]} {name}: {exc}")
                continue
            outs[name] = new_outs()
            callables[name] = (lambda i, o=outs[name], f=run_library, inp=inputs: f(**inp, **o))
        for name, fn in callables.items():  # compile, autotune, warm
            t0 = time.perf_counter()
            fn(0)
            torch.cuda.synchronize()
            first_s = time.perf_counter() - t0
            for _ in range(2):
                fn(0)
            torch.cuda.synchronize()
            host = probes.host_us(fn, args.reps)
            ev = timing.measure({name: fn}, device=device, mode="events", warmup=3, reps=args.reps)[name]
            gr = timing.measure({name: fn}, device=device, mode="graph", warmup=2, reps=5)[name]
            try:
                per = kernel_times(fn, device)
            except Exception as exc:  # noqa: BLE001 - the breakdown is a nicety
                per = {f"profiler failed: {type(exc).__name__}": 0.0}
            row = {"workload": w.uuid[:8], "shape": shape_label(w), "axes": dict(w.axes), "kernel": name,
                   "first_call_s": first_s,
                   "host_us": host, "events_us": ev.median_ms * 1e3,
                   "graph_us": gr.median_ms * 1e3, "graph_mode": gr.mode, "floor_us": floor_us,
                   "per_launch_us": per}
            if name in libraries:
                proven, account = baselines.own_kernels_ran(libraries[name], per)
                row["own_kernels"] = {"proven": proven, "account": account}
                print(f"{row['workload']} {'PROVEN' if proven else 'NOT PROVEN'} {account}", flush=True)
                unproven += 0 if proven else 1
            if ref is not None:
                for out in ("output", "final_state"):
                    a, b = outs[name][out].double(), ref[out].double()
                    row[f"{out}_rel_err"] = ((a - b).norm() / b.norm()).item()
            rows.append(row)
            launches = "  ".join(f"{k.removeprefix('void ')[:32]} {v:.0f}" for k, v in sorted(per.items()))
            errs = (f"  err o {row['output_rel_err']:.1e} state {row['final_state_rel_err']:.1e}"
                    if ref is not None else "")
            print(f"{row['workload']} {row['shape'][:40]:40} {name[:40]:40} first {first_s:5.1f} s  host "
                  f"{row['host_us']:6.1f}  events {row['events_us']:7.1f}  graph {row['graph_us']:7.1f} us  "
                  f"floor {floor_us:5.1f}  [{launches}]{errs}", flush=True)
        for name, mod in modules.items():  # the compiled kernels of this shape's plan
            for pl in getattr(mod, "_PLANS", {}).values():
                step = pl.steps[0] if getattr(pl, "steps", None) else pl  # the first run's launches (`segments`)
                for part in ("intra", "merge", "state", "out"):
                    launch = getattr(pl if part == "out" else step, part, None)
                    if launch is None or launch.compiled is None:
                        continue
                    c = launch.compiled
                    resources[f"{w.uuid[:8]}:{name}:{part}"] = {
                        "n_regs": getattr(c, "n_regs", None), "n_spills": getattr(c, "n_spills", None),
                        "shared": c.metadata.shared, "fast_launch": launch.fast, "options": launch.options,
                        "grid": list(launch.grid)}
        callables.clear()
        del inputs, ref
        torch.cuda.empty_cache()
    for key, value in resources.items():
        print(f"{key}: {value}")
    if args.json:
        args.json.write_text(json.dumps({"hardware": hw.name, "rows": rows, "resources": resources}, indent=1))
    if args.emit_champion:
        write_champion(fastest_point_champion(Path(args.kernel), task, hw.name, rows, unablated, args.keep_from),
                       args.emit_champion)
    if args.require_own_kernels:
        ran = [r for r in rows if "own_kernels" in r]
        if unproven or not ran or len(libraries) < len(args.baseline):
            print(f"--require-own-kernels: {unproven} of {len(ran)} baseline row(s) not proven"
                  + ("" if ran else " (no baseline ran)"), file=sys.stderr)
            return 1
    return 0


def write_champion(champion, path: Path) -> None:

    path.write_text(champion.to_text())
    print(f"champion ({len(champion.dispatch)} shapes) written to {path}: {champion.made_by}")


def emit_from_rows(args) -> int:
    """--rows-from: the champion of an earlier probe's rows (its point names are the JSON of each point)."""
    from evoteam.task import load_task

    if not args.emit_champion:
        raise SystemExit("--rows-from needs --emit-champion FILE (where to write the champion)")
    try:
        data = json.loads(args.rows_from.read_text())
        rows = data["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--rows-from {args.rows_from}: not a probe's --json output ({type(exc).__name__}: {exc})") from None
    if any("axes" not in r for r in rows):
        raise SystemExit(f"--rows-from {args.rows_from}: its rows have no workload axes (a probe from before "
                         f"--emit-champion); probe again")
    names = dict.fromkeys(r["kernel"] for r in rows if " ablate=" not in r["kernel"])
    write_champion(fastest_point_champion(Path(args.kernel), load_task("kda_prefill"), data.get("hardware", "h200"),
                                          rows, {name: json.loads(name) for name in names}, args.keep_from),
                   args.emit_champion)
    return 0


SHAPE_AXES = ("num_v_heads", "num_sequences", "seq_len")  # the chunk family's params_for axes


def shape_of(axes: dict) -> tuple:
    """A workload's (or a dispatch entry's) shape: its SHAPE_AXES values."""
    return tuple(axes.get(a) for a in SHAPE_AXES)


def fastest_point_champion(kernel: Path, task, hardware: str, rows: list[dict], points: dict[str, dict],
                           keep_from: Path | None = None):
    """A Champion of the kernel's family: for each probed shape (SHAPE_AXES; workloads of one shape, e.g. the two
    gate forms, share an entry) the point (PARAMS overrides) of least graph-replay time, in geomean over that shape's
    workloads where every point was timed on all of them. Names with an ablation are not points and never count.
    keep_from: a champion file of the same family whose entries stand for the shapes given none here."""
    from evoteam.families import Champion, load_champion, load_families
    from evoteam.harness.model import geomean

    family = next((f for f in load_families(task) if f.path.resolve() == kernel.resolve()), None)
    if family is None:
        raise SystemExit(f"--emit-champion: {kernel} is not a family file of {task.name}'s families.json")
    times: dict[tuple, dict[str, dict[str, float]]] = {}  # shape -> point name -> workload -> graph us
    for row in rows:
        if row["kernel"] in points and row.get("graph_us"):
            shape = shape_of(row["axes"])
            times.setdefault(shape, {}).setdefault(row["kernel"], {})[row["workload"]] = row["graph_us"]
    first = next(iter(points))
    dispatch, gains = [], []
    for shape in sorted(times):
        by_point = times[shape]
        workloads = set().union(*by_point.values())
        complete = {name: t for name, t in by_point.items() if set(t) == workloads}
        if not complete:
            continue
        name = min(complete, key=lambda n: geomean(list(complete[n].values())))
        dispatch.append([dict(zip(SHAPE_AXES, shape)), points[name]])
        if first in complete:
            gains += [complete[first][u] / complete[name][u] for u in workloads]
    made_by = (f"scripts/kda_probe.py --emit-champion: per shape the point of least graph-replay device time among "
               f"{len(points)} ({', '.join(points)}) on {len(gains)} workloads; {geomean(gains) or 0:.3f}x the first "
               f"point's time in geomean (unchecked by the probe)")
    if keep_from is not None:
        try:
            base = load_champion(keep_from)
        except ValueError as exc:
            raise SystemExit(f"--keep-from: {exc}") from None
        if base.family.path.resolve() != family.path.resolve():
            raise SystemExit(f"--keep-from {keep_from}: a champion of family {base.family.name}, not {family.name}")
        chosen = {shape_of(axes) for axes, _ in dispatch}
        kept = [[axes, point] for axes, point in base.dispatch if shape_of(axes) not in chosen]
        dispatch = sorted(dispatch + kept, key=lambda entry: shape_of(entry[0]))
        made_by += f"; {len(kept)} other shapes' entries kept from {keep_from.name}"
    return Champion(task=task.name, family=family, hardware=hardware, params={}, dispatch=dispatch, made_by=made_by)


if __name__ == "__main__":
    sys.exit(main())
