"""The KDA oracle (kernels/kda_prefill/oracle.py) against reference.py on the largest workload, side by side in
one run on a GPU: one call of each after the oracle's warm-up (compilation), host clock around synchronised
calls, and how far apart their outputs are. Usage from the repository root: python3 scripts/kda_oracle_speed.py"""

import time

import torch

from evoteam.task import load_task

task = load_task("kda_prefill")
w = max(task.workloads, key=lambda w: w.axes["total_seq_len"] * w.axes["num_heads"])
inputs = task.make_inputs(w, torch.Generator("cuda").manual_seed(3), "cuda")
args = [inputs[n] for n in task.definition.inputs]


def timed(run):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = run(*args)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


task.oracle_module.run(*args)
(o, fs), to = timed(task.oracle_module.run)
(o2, fs2), tr = timed(task.reference_module.run)
print(w.uuid, w.axes, f"oracle {to*1e3:.1f} ms, reference {tr*1e3:.1f} ms, ratio {tr/to:.1f}x",
      "fs relnorm", ((fs - fs2).norm() / fs2.norm()).item(), "o max", (o.double() - o2.double()).abs().max().item())
