"""How fast the GPU can gather an MLA decode workload's KV rows at all: the ceiling under issue 7's
"80% of the copy ceiling" target, measured side by side with the decode kernels in one process.

    python scripts/gather_ceiling.py [KERNEL.py|KERNEL.cu ...] [--workloads PREFIX ...] [--json OUT.json]

For each workload (default: the 8 largest), on the harness's inputs (task.make_inputs, seed 1234),
everything timed under graph replay (20 x [L2 flush, call] minus the flushes alone, median of --reps):
  copy               a device-to-device copy moving the workload's compulsory bytes (half read, half written)
  copy x4            the same with 4x the bytes (the two copies give a call's fixed cost and streaming rate)
  copy (Triton)      the same bytes copied by a Triton kernel on the multiprocessors
  gather:<indices>   a Triton kernel that reads exactly the rows a decode must (ckv 1024 B and kpe 128 B per
                     token, through the indices) and XORs them, the best of a few launch configurations:
      workload       the workload's own kv_indices (pages scattered over the whole page pool)
      sorted         the same pages in ascending order
      compact        a random permutation of pages 0 .. N-1 (as random, over a footprint of N pages)
      contiguous     pages 0 .. N-1 in order (a stream through the same kernel)
  flashinfer         FlashInfer with plan() cached, and each kernel file given (default: the MLA champion; a .cu built by torch's extension loader)
", clean L2": the same call after the flush and a read of 2x L2 of other data, minus that read: the
flush (a memset) leaves L2 full of dirty lines that the timed call otherwise writes back.
Each line: time, compulsory bytes (task.min_bytes for the decoders, the gathered bytes and indices for
the gathers) per second as % of the spec sheet's copy ceiling, and time relative to gather:workload
(the same rows, nothing else done). gather:workload is the bandwidth a decode of these inputs can
reach at most on this GPU with this kind of kernel; the gaps between the four gathers say what costs
(order, footprint).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

LARGEST_8 = ["5bef8d88", "1c3743b9", "939f995a", "d771f51c", "65082ffb", "b15c7099", "f4367b30", "80797c3d"]
# (BLOCK_N, ROWS per program, num_warps): rows in flight per program, programs of few and of many rows
CONFIGS = [(16, 64, 4), (16, 128, 4), (32, 256, 4), (32, 512, 8), (64, 512, 8), (64, 1024, 8)]
ORDERS = ["workload", "sorted", "compact", "contiguous"]


@triton.jit
def _gather_xor(ckv_ptr, kpe_ptr, idx_ptr, out_ptr, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                D_CKV: tl.constexpr, D_KPE: tl.constexpr):
    """The bitwise XOR of the ckv and kpe rows (as int16) named by idx[pid * ROWS .. +ROWS]: every byte a
    decode gathers, read once with 16-byte vector loads, one integer op per element (exact, order-free,
    half the registers of an fp32 sum, so more loads in flight per SM; no cross-thread work in the loop),
    one store per program. (Triton does not pipeline loads that feed no tl.dot: bytes in flight come
    from the programs per SM and the BLOCK_N rows each has in flight.)"""
    pid = tl.program_id(0)
    start = pid * ROWS
    end = tl.minimum(start + ROWS, n)
    offs_c = tl.arange(0, D_CKV)
    offs_p = tl.arange(0, D_KPE)
    acc_c = tl.zeros([BLOCK_N, D_CKV], dtype=tl.int16)
    acc_p = tl.zeros([BLOCK_N, D_KPE], dtype=tl.int16)
    for r in range(start, end, BLOCK_N):
        offs = r + tl.arange(0, BLOCK_N)
        valid = offs < end
        page = tl.load(idx_ptr + offs, mask=valid, other=0).to(tl.int64)
        acc_c ^= tl.load(ckv_ptr + page[:, None] * D_CKV + offs_c[None, :], mask=valid[:, None], other=0)
        acc_p ^= tl.load(kpe_ptr + page[:, None] * D_KPE + offs_p[None, :], mask=valid[:, None], other=0)
    base = out_ptr + pid.to(tl.int64) * (D_CKV + D_KPE)
    tl.store(base + offs_c, tl.xor_sum(acc_c, axis=0))
    tl.store(base + D_CKV + offs_p, tl.xor_sum(acc_p, axis=0))


def gather_fn(ckv, kpe, idx, config):
    """A callable (for timing.measure) that runs the gather over idx with one configuration; .out holds
    each program's XOR (int16 [programs, d_ckv + d_kpe])."""
    import torch

    block_n, rows, warps = config
    n = idx.numel()
    programs = triton.cdiv(n, rows)
    ckv16, kpe16 = ckv.view(torch.int16), kpe.view(torch.int16)
    out = torch.empty((programs, ckv.shape[-1] + kpe.shape[-1]), dtype=torch.int16, device=ckv.device)

    def call(i: int) -> None:
        _gather_xor[(programs,)](ckv16, kpe16, idx, out, n, ROWS=rows, BLOCK_N=block_n, D_CKV=ckv.shape[-1],
                                 D_KPE=kpe.shape[-1], num_warps=warps)

    call.out = out
    return call


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """dst[:n] = src[:n], BLOCK elements per program (16-byte accesses): a copy on the multiprocessors
    (torch's copy_ of a contiguous tensor is a memcpy, which a CUDA graph may give to a copy engine)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=valid), mask=valid)


def copy_fn(nbytes, device):
    """A callable that copies nbytes // 2 bytes on the multiprocessors (nbytes moved: read + written)."""
    import torch

    n = nbytes // 2 // 4
    src = torch.arange(n, dtype=torch.int32, device=device)
    dst = torch.full_like(src, -1)

    def call(i: int) -> None:
        _copy[(triton.cdiv(n, 4096),)](src, dst, n, BLOCK=4096, num_warps=8)

    call.moved, call.src, call.dst = 2 * n * 4, src, dst
    return call


def then(first, second):
    """first, then second, as one callable (for the clean-L2 difference)."""
    def call(i: int) -> None:
        first(i)
        second(i)

    return call


def xor_rows(t):
    """Bitwise XOR over dim 0 of an int16 tensor (on the host)."""
    import numpy as np

    return np.bitwise_xor.reduce(t.cpu().numpy(), axis=0)


def index_orders(kv_indices, gen):
    """The four orders of pages the gather is timed with (ORDERS), each as many pages as kv_indices."""
    import torch

    n = kv_indices.numel()
    dev = kv_indices.device
    return {"workload": kv_indices,
            "sorted": torch.sort(kv_indices).values.contiguous(),
            "compact": torch.randperm(n, generator=gen, device=dev).to(torch.int32),
            "contiguous": torch.arange(n, dtype=torch.int32, device=dev)}


def load_kernels(paths: list[str], folder: Path) -> dict:
    """Each kernel file's module (its `run`), by the file's stem: a Python/Triton file as the sweep loads it, a CUDA
    or C++ file (torch binding, entry `run`, as the harness builds a "cuda" solution) by torch's extension loader,
    built in FOLDER."""
    from evoteam.families import load_variants

    modules = {}
    for kernel in paths:
        path = Path(kernel).resolve()
        if path.suffix in (".cu", ".cpp"):
            from torch.utils.cpp_extension import load

            build = folder / f"build-{path.stem}"
            build.mkdir(parents=True, exist_ok=True)
            modules[path.stem] = load(name=f"gather_ceiling_{path.stem}", sources=[str(path)],
                                      with_cuda=path.suffix == ".cu", build_directory=str(build), verbose=False)
            continue
        for _point, module in load_variants(path, [{}], folder, "gather_ceiling"):
            modules[path.stem] = module
    return modules


def main(argv: list[str] | None = None) -> int:
    import probes  # scripts/probes.py, beside this script

    p = probes.parser(__doc__.splitlines()[0], LARGEST_8, reps=10)
    p.add_argument("kernels", nargs="*", help="kernel files (default: the MLA champion, built from its champion file)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.kernels:
        from evoteam.families import load_champion

        built = Path(tempfile.mkdtemp(prefix="gather-")) / "champion_h200.py"
        built.write_text(load_champion(ROOT / "kernels/mla_decode/champion_h200.json").source())
        args.kernels = [str(built)]
    probes.arm_deadline(args.deadline)

    import torch

    from evoteam import hardware
    from evoteam.harness import baselines, timing
    from evoteam.task import load_task, select_workloads, shape_label

    hw = hardware.resolve("auto")
    task = load_task("mla_decode")
    device = hw.torch_device
    ceiling = (hw.bandwidth_ceiling_tbs or 1.0) * 1e12
    fi = baselines.create("flashinfer", task, hw, backend="auto", plan="cached")
    modules = load_kernels(args.kernels, Path(tempfile.mkdtemp(prefix="gather-ceiling-")))
    l2 = torch.cuda.get_device_properties(torch.device(device)).L2_cache_size
    clean_rows = 2 * l2 // (2 * 576)
    clean_ckv = torch.ones((clean_rows, 512), dtype=torch.bfloat16, device=device)
    clean_kpe = torch.ones((clean_rows, 64), dtype=torch.bfloat16, device=device)
    clean_idx = torch.arange(clean_rows, dtype=torch.int32, device=device)
    rows = []
    for w in select_workloads(task.scaled_workloads("full"), args.workloads):
        gen = torch.Generator(device=device)
        gen.manual_seed(1234)
        inputs = task.make_inputs(w, gen, device)
        shapes = task.output_shapes(w, inputs)
        ckv, kpe = inputs["ckv_cache"].squeeze(1), inputs["kpe_cache"].squeeze(1)
        n = inputs["kv_indices"].numel()
        gathered = n * (ckv.shape[-1] + kpe.shape[-1]) * ckv.element_size() + n * 4
        decode_bytes = task.min_bytes(w, inputs)
        callables, nbytes = {}, {}
        half = torch.empty(decode_bytes // 2, dtype=torch.uint8, device=device)
        dst = torch.empty_like(half)
        callables["copy"], nbytes["copy"] = (lambda i, d=dst, s=half: d.copy_(s)), 2 * half.numel()
        # the same copy of 4x the bytes: with the 1x copy, the fixed cost of a call under this timing
        # (launch in the graph, ramp, the flush's dirty L2 lines written back) against its streaming rate
        half4 = torch.empty(4 * half.numel(), dtype=torch.uint8, device=device)
        dst4 = torch.empty_like(half4)
        callables["copy x4"], nbytes["copy x4"] = (lambda i, d=dst4, s=half4: d.copy_(s)), 2 * half4.numel()
        sm_copy = copy_fn(decode_bytes, device)
        callables["copy (Triton)"], nbytes["copy (Triton)"] = sm_copy, sm_copy.moved
        orders = index_orders(inputs["kv_indices"], gen)
        # each order's best configuration, chosen on one graph timing of all of them
        for order, idx in orders.items():
            trial = {str(c): gather_fn(ckv, kpe, idx, c) for c in CONFIGS}
            t = timing.measure(trial, device=device, mode="graph", warmup=2, reps=3)
            best = min(trial, key=lambda k: t[k].median_ms)
            callables[f"gather:{order}"], nbytes[f"gather:{order}"] = trial[best], gathered
            print(f"{w.uuid[:8]} gather:{order}: best of {len(CONFIGS)} configurations {best}", flush=True)
        timed = callables["gather:workload"]  # the configuration timed reads exactly the decode's rows
        timed(0)
        rows_read = orders["workload"].long()
        want = xor_rows(torch.cat([ckv[rows_read], kpe[rows_read]], dim=1).view(torch.int16))
        assert (xor_rows(timed.out) == want).all(), "the gather kernel reads the wrong rows"
        run_fi = fi.prepare(task, w, inputs)
        for name, fn in [("flashinfer", run_fi)] + [(k, m.run) for k, m in modules.items()]:
            o = {"output": torch.empty(shapes["output"], dtype=torch.bfloat16, device=device),
                 "lse": torch.empty(shapes["lse"], dtype=torch.float32, device=device)}
            callables[name] = (lambda i, f=fn, o=o, inp=inputs: f(**inp, **o))
            nbytes[name] = decode_bytes
            callables[name](0)
        # The harness's flush is a memset: it leaves L2 full of dirty lines, which the timed call then
        # writes back. "clean" reads 2x L2 of other data after the flush (the write-back happens there)
        # and leaves clean lines; t(clean + X) - t(clean) is X's time on a clean L2.
        clean = gather_fn(clean_ckv, clean_kpe, clean_idx, CONFIGS[0])
        callables["clean"], nbytes["clean"] = clean, 0
        for name in ("copy (Triton)", "gather:workload", "flashinfer", *modules):
            callables[f"clean + {name}"], nbytes[f"clean + {name}"] = then(clean, callables[name]), nbytes[name]
        torch.cuda.synchronize()
        t = timing.measure(callables, device=device, mode="graph", warmup=3, reps=args.reps)
        ref = t["gather:workload"].median_ms
        for key in callables:
            us, name = t[key].median_ms * 1e3, key
            if key == "clean":
                continue
            if key.startswith("clean + "):
                us -= t["clean"].median_ms * 1e3
                name = key[len("clean + "):] + ", clean L2"
            row = {"workload": w.uuid[:8], "shape": shape_label(w), "what": name, "graph_us": us,
                   "timing": t[key].mode, "bytes": nbytes[key],
                   "pct_of_ceiling": 100 * nbytes[key] / (us * 1e-6) / ceiling,
                   "time_vs_gather_workload": us / (ref * 1e3)}
            rows.append(row)
            print(f"{row['workload']} {row['shape']:30} {name:22} {us:7.1f} us ({row['timing']})  "
                  f"{row['pct_of_ceiling']:5.1f}% of {hw.bandwidth_ceiling_tbs} TB/s  "
                  f"{row['time_vs_gather_workload']:5.2f}x gather:workload's time", flush=True)
        del inputs, callables, half, dst, half4, dst4, orders
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps({"ceiling_tbs": hw.bandwidth_ceiling_tbs, "configs": CONFIGS, "rows": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
