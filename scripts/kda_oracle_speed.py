"""The KDA oracle (kernels/kda_prefill/oracle.py) against the definition's reference on the largest workload, side by side in
one run on a GPU: one call of each after the oracle's warm-up (compilation), host clock around synchronised
calls, and how far apart their outputs are. Usage from the repository root: python3 scripts/kda_oracle_speed.py
(tests/test_gpu.py calls `compare` on other workloads and holds its results to tolerances)."""

import time

import torch

from evoteam.task import load_task


def compare(task, workload, oracle) -> dict:
    """Oracle and reference on one fresh input set of `workload`: their outputs and seconds per call."""
    inputs = task.make_inputs(workload, torch.Generator("cuda").manual_seed(3), "cuda")
    args = [inputs[n] for n in task.definition.inputs]

    def timed(run):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = run(*args)
        torch.cuda.synchronize()
        return out, time.perf_counter() - start

    oracle.run(*args)  # compiles
    oracle_out, oracle_s = timed(oracle.run)
    reference_out, reference_s = timed(task.reference_module.run)
    return {"oracle": oracle_out, "oracle_s": oracle_s, "reference": reference_out, "reference_s": reference_s}


if __name__ == "__main__":
    task = load_task("kda_prefill")
    w = max(task.workloads, key=lambda w: w.axes["seq_len"] * w.axes["num_v_heads"])
    r = compare(task, w, task.oracle_module)
    (o, fs), (o2, fs2), to, tr = r["oracle"], r["reference"], r["oracle_s"], r["reference_s"]
    print(w.uuid, w.axes, f"oracle {to*1e3:.1f} ms, reference {tr*1e3:.1f} ms, ratio {tr/to:.1f}x",
          "fs relnorm", ((fs - fs2).norm() / fs2.norm()).item(), "o max", (o.double() - o2.double()).abs().max().item())
