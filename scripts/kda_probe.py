"""Where a KDA prefill kernel's time goes on a GPU: device time per launch (profiler), CUDA events
around one call (the harness's mode), graph replay, host time of one call, the compiled kernels'
registers, spills and shared memory; optionally library baselines next to it (fla's chunk_kda, FlashKDA: their
per-launch kernel names show which library code really ran) and errors against the reference. For the design note's prediction-versus-measurement table; not a verdict (use evoteam.bench).

    python scripts/kda_probe.py [KERNEL.py] [--points '[{}, {"BV": 16}]'] [--workloads PREFIX ...]
                                [--baseline fla --baseline flashkda] [--check] [--json OUT.json]

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
import statistics
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
    """Median device time (us) per kernel name over `calls` calls (profiler)."""
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
    return {name: statistics.median(v) for name, v in per.items()}


def main(argv: list[str] | None = None) -> int:
    import probes  # scripts/probes.py, beside this script

    p = probes.parser(__doc__.splitlines()[0], DEFAULT_WORKLOADS, reps=20)
    p.add_argument("kernel", nargs="?", default=str(ROOT / "kernels/kda_prefill/chunk_triton.py"))
    p.add_argument("--baseline", action="append", default=[],
                   help="time a baseline adapter too (repeatable): fla (the first call per shape autotunes), flashkda")
    p.add_argument("--check", action="store_true", help="errors against the fp32 reference (slow on long sequences)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    probes.arm_deadline(args.deadline)

    import torch

    from evoteam import hardware
    from evoteam.families import load_variants
    from evoteam.harness import baselines, timing
    from evoteam.task import load_task, select_workloads, shape_label

    hw = hardware.resolve("auto")
    task = load_task("kda_prefill")
    workloads = select_workloads(task.scaled_workloads("full"), args.workloads)
    device = hw.torch_device
    variants = load_variants(Path(args.kernel), json.loads(args.points), Path(tempfile.mkdtemp(prefix="kda-probe-")),
                             "kda_probe")
    modules = {json.dumps(point, separators=(",", ":")): module for point, module in variants}
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
    for w in workloads:
        gen = torch.Generator(device=device)
        gen.manual_seed(1234)
        inputs = task.make_inputs(w, gen, device)
        shapes = task.output_shapes(w, inputs)
        floor_us = task.min_bytes(w, inputs) / ((hw.bandwidth_ceiling_tbs or 1.0) * 1e12) * 1e6
        ref = task.reference(inputs) if args.check else None
        callables = {}
        outs = {}

        def new_outs(shapes=shapes):
            return {"o": torch.empty(shapes["o"], dtype=torch.bfloat16, device=device),
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
            row = {"workload": w.uuid[:8], "shape": shape_label(w), "kernel": name, "first_call_s": first_s,
                   "host_us": host, "events_us": ev.median_ms * 1e3,
                   "graph_us": gr.median_ms * 1e3, "graph_mode": gr.mode, "floor_us": floor_us,
                   "per_launch_us": per}
            if ref is not None:
                for out in ("o", "final_state"):
                    a, b = outs[name][out].double(), ref[out].double()
                    row[f"{out}_rel_err"] = ((a - b).norm() / b.norm()).item()
            rows.append(row)
            launches = "  ".join(f"{k.removeprefix('void ')[:32]} {v:.0f}" for k, v in sorted(per.items()))
            errs = (f"  err o {row['o_rel_err']:.1e} state {row['final_state_rel_err']:.1e}"
                    if ref is not None else "")
            print(f"{row['workload']} {row['shape'][:40]:40} {name[:40]:40} first {first_s:5.1f} s  host "
                  f"{row['host_us']:6.1f}  events {row['events_us']:7.1f}  graph {row['graph_us']:7.1f} us  "
                  f"floor {floor_us:5.1f}  [{launches}]{errs}", flush=True)
        for name, mod in modules.items():  # the compiled kernels of this shape's plan
            for pl in getattr(mod, "_PLANS", {}).values():
                for part in ("intra", "state", "out"):
                    launch = getattr(pl, part, None)
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
        args.json.write_text(json.dumps({"rows": rows, "resources": resources}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
