"""Where an MLA decode kernel's time goes on a GPU, next to FlashInfer's (plan cached): host cost of one
call, device time with events (the harness's mode) and with graph replay, resources of the compiled
kernels. For the design note's prediction-versus-measurement table; not a verdict (use evoteam.bench).

    python scripts/mla_probe.py [KERNEL.py ...] [--points '[{}, {"COMBINE": "ctas"}]'] [--workloads PREFIX ...] [--json OUT.json]

--profile: no timing; after the warm-up, one call of each kernel (and FlashInfer) per workload between
cudaProfilerStart and cudaProfilerStop, after an L2 flush, for `ncu --profile-from-start off`
(gpu_kernel_report.sh's ncu part).

--points rewrites each kernel file's PARAMS (a DISPATCH entry, as in a champion, still wins for its shapes).

For each kernel file (default: kernels/mla_decode/flashdecode_triton.py) and each workload (default:
one small and one large of each batch size), on fresh random inputs:
  host_us     median host time of one call, launches queued behind a busy GPU (no sync inside)
  events_us   CUDA events around one call after an L2 flush (what the harness times)
  graph_us    graph replay of 20 x [flush, call] minus the flushes alone, per call (device time)
  floor_us    compulsory bytes / the measured copy bandwidth (hardware spec sheet)
  flush_us    device time of the harness's L2 flush: host work shorter than this is hidden from events
and for Triton kernels the registers, spills and shared memory of each compiled kernel.
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

DEFAULT_WORKLOADS = ["00cb2bc2", "53a7dfec", "a128f96f", "84221f45", "45be562f", "5bef8d88"]


def main(argv: list[str] | None = None) -> int:
    import probes  # scripts/probes.py, beside this script

    p = probes.parser(__doc__.splitlines()[0], DEFAULT_WORKLOADS, reps=30)
    p.add_argument("kernels", nargs="*", default=[str(ROOT / "kernels/mla_decode/flashdecode_triton.py")])
    p.add_argument("--profile", action="store_true", help="one profiled call per kernel and workload, no timing")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    probes.arm_deadline(args.deadline)

    import torch

    from evoteam import hardware
    from evoteam.families import load_variants
    from evoteam.harness import baselines, timing
    from evoteam.task import load_task, select_workloads, shape_label

    hw = hardware.resolve("auto")
    task = load_task("mla_decode")
    workloads = select_workloads(task.scaled_workloads("full"), args.workloads)
    device = hw.torch_device
    flusher = timing.L2Flusher(device)
    fns = {}
    try:
        fi = baselines.create("flashinfer", task, hw, backend="auto", plan="cached")
        fns["flashinfer"] = fi
    except Exception as exc:  # noqa: BLE001
        print(f"flashinfer unavailable: {exc}")
    folder = Path(tempfile.mkdtemp(prefix="mla-probe-"))
    modules = {}
    for kernel in args.kernels:
        for point, module in load_variants(Path(kernel).resolve(), json.loads(args.points), folder, "mla_probe"):
            modules[Path(kernel).stem + (json.dumps(point, separators=(",", ":")) if point else "")] = module

    # Device time of one flush: what host work can hide behind in events mode.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        flusher()
    start.record()
    for _ in range(10):
        flusher()
    end.record()
    end.synchronize()
    flush_us = start.elapsed_time(end) * 100
    print(f"{hw.name}: L2 flush {flush_us:.1f} us of device time; copy ceiling {hw.bandwidth_ceiling_tbs} TB/s")

    rows = []
    for w in workloads:
        gen = torch.Generator(device=device)
        gen.manual_seed(1234)
        inputs = task.make_inputs(w, gen, device)
        shapes = task.output_shapes(w, inputs)
        floor_us = task.min_bytes(w, inputs) / ((hw.bandwidth_ceiling_tbs or 1.0) * 1e12) * 1e6
        callables = {}
        outs = {}
        for name, mod in modules.items():
            outs[name] = {"output": torch.empty(shapes["output"], dtype=torch.bfloat16, device=device),
                          "lse": torch.empty(shapes["lse"], dtype=torch.float32, device=device)}
            callables[name] = (lambda i, mod=mod, o=outs[name], inp=inputs: mod.run(**inp, **o))
        if "flashinfer" in fns:
            run_fi = fns["flashinfer"].prepare(task, w, inputs)
            outs["flashinfer"] = {"output": torch.empty(shapes["output"], dtype=torch.bfloat16, device=device),
                                  "lse": torch.empty(shapes["lse"], dtype=torch.float32, device=device)}
            callables["flashinfer"] = (lambda i, o=outs["flashinfer"], f=run_fi, inp=inputs: f(**inp, **o))
        for name, fn in callables.items():  # compile, plan, warm; the first call alone, so a hang shows where
            t0 = time.perf_counter()
            fn(0)
            torch.cuda.synchronize()
            print(f"{w.uuid[:8]} {name}: first call {time.perf_counter() - t0:.1f} s", flush=True)
            for _ in range(2):
                fn(0)
            torch.cuda.synchronize()
        if args.profile:
            for name, fn in callables.items():
                flusher()
                torch.cuda.synchronize()
                torch.cuda.cudart().cudaProfilerStart()
                fn(0)
                torch.cuda.synchronize()
                torch.cuda.cudart().cudaProfilerStop()
                print(f"{w.uuid[:8]} {name}: profiled", flush=True)
            callables.clear()
            del inputs
            continue
        ref = task.reference(inputs)
        for name, fn in callables.items():
            host = probes.host_us(fn, args.reps)
            ev = timing.measure({name: fn}, device=device, mode="events", warmup=5, reps=args.reps)[name]
            gr = timing.measure({name: fn}, device=device, mode="graph", warmup=3, reps=10)[name]
            err = ((outs[name]["output"].double() - ref["output"].double()).norm()
                   / ref["output"].double().norm()).item()
            row = {"workload": w.uuid[:8], "shape": shape_label(w), "kernel": name,
                   "host_us": host, "events_us": ev.median_ms * 1e3, "graph_us": gr.median_ms * 1e3,
                   "graph_mode": gr.mode, "floor_us": floor_us, "rel_err": err}
            rows.append(row)
            print(f"{row['workload']} {row['shape']:34} {name:24} host {row['host_us']:6.1f} us  events "
                  f"{row['events_us']:6.1f} us  graph {row['graph_us']:6.1f} us ({gr.mode})  floor {floor_us:5.1f} us  "
                  f"rel err {err:.1e}", flush=True)
        callables.clear()
        del inputs
        torch.cuda.empty_cache()
    resources = {}
    for name, mod in modules.items():
        for pl in getattr(mod, "_PLANS", {}).values():
            for part in ("piece", "merge"):
                launch = getattr(pl, part, None)
                if not launch or launch[0].compiled is None:
                    continue
                c = launch[0].compiled
                resources[f"{name}:{part}:{c.name}:{launch[0].options}"] = {
                    "n_regs": getattr(c, "n_regs", None), "n_spills": getattr(c, "n_spills", None),
                    "shared": c.metadata.shared, "fast_launch": launch[0].fast}
    for key, value in resources.items():
        print(f"{key}: {value}")
    if args.json:
        args.json.write_text(json.dumps({"flush_us": flush_us, "rows": rows, "resources": resources}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
