"""What an LLM member is told, as a kernel engineer would want it on their desk.

The task brief is fixed for a run and opens every turn's conversation: the entry point's interface
(every argument's shape, dtype and meaning, which names are outputs), the axes and constraints, the
run's workloads, the correctness rule and tolerances, how time is measured and against which
baseline, the target's facts from its spec sheet, the rules (what may be imported, what the harness
counts as cheating) and the reference implementation's source. The state brief changes each turn:
the budget left, the team's progress, and the best verified kernel (else the seed kernel) with its
per-workload table. Tool results carry the same table and, for failures, the checker's own words.

`python -m evoteam.team.brief --task mla_decode --hardware h200` prints a task's brief and its size.
"""

from __future__ import annotations

import argparse

from evoteam import report
from evoteam.harness import scan
from evoteam.harness.model import EvalResult, Status
from evoteam.target import Target
from evoteam.task import Task, shape_label
from evoteam.team.budget import Ledger
from evoteam.team.progress import Progress
from evoteam.team.workspace import Attempt, Workspace

MAX_FAILURE_CHARS = 4000  # a failure's detail (the checker's words, a compiler's output) in a tool result


def _shape(task: Task, spec) -> str:
    if not spec.shape:
        return "scalar"
    dims = []
    for axis in spec.shape:
        a = task.definition.axes[axis]
        dims.append(f"{axis}={a.value}" if a.type == "const" else axis)
    return "[" + ", ".join(dims) + "]"


def interface(task: Task) -> str:
    d = task.definition
    args = ", ".join(list(d.inputs) + list(d.outputs))
    lines = [f"def run({args}) -> None   # called with keyword arguments; returns nothing",
             "", "Inputs (read-only: the harness compares every input with its own copy after every call):"]
    lines += [f"- {n}: {s.dtype} {_shape(task, s)}{' - ' + s.description if s.description else ''}"
              for n, s in d.inputs.items()]
    lines += ["", "Outputs (preallocated by the harness and filled with poison before every call: write every "
              "element):"]
    lines += [f"- {n}: {s.dtype} {_shape(task, s)}{' - ' + s.description if s.description else ''}"
              for n, s in d.outputs.items()]
    lines += ["", "Axes:"]
    for name, a in d.axes.items():
        what = f"const {a.value}" if a.type == "const" else "var"
        lines.append(f"- {name}: {what}{' - ' + a.description if a.description else ''}")
    if d.constraints:
        lines += ["", "Constraints:"] + [f"- {c}" for c in d.constraints]
    return "\n".join(lines)


SUFFIX_OF = {"python": ".py", "triton": ".py", "cuda": ".cu", "cpp": ".cpp"}
FENCE = {".py": "python", ".cu": "cuda", ".cpp": "cpp"}


def languages(task: Task, hw) -> str:
    """Which languages the target builds, and how a compiled kernel is called."""
    suffixes = sorted({SUFFIX_OF[lang] for lang in hw.languages if lang in SUFFIX_OF}, key=list(FENCE).index)
    args = ", ".join(list(task.definition.inputs) + list(task.definition.outputs))
    lines = [f"A kernel file's suffix is its language; {hw.name} builds {', '.join(suffixes)}."]
    if len(suffixes) > 1:
        lines.append(f"A .cu (CUDA C++) or .cpp file is built by torch's extension loader with the machine's compiler, "
                     f"inside the sandbox (a build failure is a compile error with the compiler's message), and must "
                     f"export `run` through PYBIND11_MODULE(TORCH_EXTENSION_NAME, m); it is called positionally, "
                     f"run({args}), with torch::Tensor arguments (a scalar input as double).")
    return "\n".join(lines)


def workload_list(task: Task, workloads: list) -> str:
    groups: dict[str, list] = {}
    for w in workloads:
        groups.setdefault(task.workload_group(w), []).append(w)
    lines = [f"{len(workloads)} workloads in {len(groups)} groups; a tool's `workloads` argument takes uuid "
             f"prefixes (default: a quick probe set)."]
    for group, members in groups.items():
        lines.append(f"group {group} ({len(members)}):")
        lines += [f"  {w.uuid[:8]}  {shape_label(w)}" for w in members]
    return "\n".join(lines)


def correctness_rule(task: Task) -> str:
    tols = "; ".join(f"{n}: atol {t.atol:g}, rtol {t.rtol:g}, relative L2 error at most {t.max_rel_norm:g}"
                     for n, t in ((n, task.tolerance(n)) for n in task.definition.outputs))
    return ("Every call gets fresh random inputs (a new secret seed per evaluation); every element of every "
            "output is compared with the reference: |out - ref| <= atol or |out - ref| <= rtol * (|ref| + 1e-8) (flashinfer-bench's rule); NaN or Inf where the "
            f"reference is finite fails, and so does an element left unwritten. Tolerances: {tols}.")


def baseline_words(baseline: str, hw) -> str:
    if baseline != "auto":
        return f"the baseline {baseline}"
    from evoteam.harness.baselines import AUTO_ORDER

    return f"the best library baseline on the target (the first of {', '.join(AUTO_ORDER[hw.backend])} that serves the task)"


def timing_rule(baseline: str, timing_mode: str, is_gpu: bool) -> str:
    where = ("device time of the calls, the L2 cache flushed between timed calls" if is_gpu
             else "the CPU time the kernel's process used, single-threaded, caches flushed before each call")
    return (f"Speedup = baseline time / your time, per workload, against {baseline}, timed side by side in the "
            f"same rounds (timing mode {timing_mode}: {where}); median of many calls after warm-up, and your "
            f"kernel is timed twice to measure the noise. The geometric mean over workloads ranks kernels.")


def hardware_facts(hw) -> str:
    if not hw.is_gpu:
        return ("CPU (a test target): Triton kernels run under TRITON_INTERPRET=1, and the shapes are scaled "
                "down; figures here test the flow, not a GPU's performance.")
    facts = [f"{hw.name}: {hw.vendor} {hw.architecture} ({hw.arch_target}, backend {hw.backend})"]
    for label, value, unit in (("multiprocessors", hw.multiprocessors, ""), ("memory", hw.memory_gib, " GiB"),
                               ("L2 cache", hw.l2_mib, " MiB"),
                               ("peak memory bandwidth", hw.peak_memory_bandwidth_tbs, " TB/s (datasheet)"),
                               ("measured copy bandwidth", hw.measured_copy_bandwidth_tbs, " TB/s"),
                               ("peak bf16 dense", hw.peak_bf16_dense_tflops, " TFLOP/s")):
        if value:
            facts.append(f"{label} {value:g}{unit}")
    return "; ".join(facts) + ". The per-workload table shows the share of the bandwidth ceiling reached."


def rules() -> str:
    allowed = ", ".join(m for m in scan.ALLOWED_TOP_MODULES if m != "__future__")
    return ("- A kernel is one Python file defining the entry point above. It may import only: "
            f"{allowed}; never the baseline libraries, the reference, the task's files or evoteam.\n"
            "- It runs in a sandbox: no network, nothing writable but its scratch folder, a fresh process "
            "that the harness ends after the evaluation.\n"
            "- Counted as cheating (the result is failed or flagged, never a win): reading or changing anything "
            "outside the call's own arguments; returning before the work is done (work left running on "
            "other streams, threads or processes); reusing results across calls (inputs are fresh every call); "
            "skipping work that the output depends on; calling the baseline's kernels.\n"
            "- Every check and benchmark counts against the team's evaluation budget; the same file on the "
            "same workloads is answered from the journal, not run again.")


def task_brief(target: Target, baseline: str) -> str:
    """The part of every member's brief that is fixed for the run."""
    task, hw, workloads = target.task, target.hw, list(target.workloads)
    reference = task.definition.reference
    return "\n\n".join([
        f"# Task {task.definition.name} ({task.name})\n{task.definition.description or ''}",
        f"## The entry point\n{interface(task)}",
        f"## Languages\n{languages(task, hw)}",
        f"## Workloads of this run\n{workload_list(task, workloads)}",
        f"## Correctness\n{correctness_rule(task)}",
        f"## Timing\n{timing_rule(baseline_words(baseline, hw), target.timing_mode, hw.is_gpu)}",
        f"## Target hardware\n{hardware_facts(hw)}",
        f"## Rules\n{rules()}",
        f"## The reference implementation (PyTorch; the source of truth for every output)\n"
        f"```python\n{reference.rstrip()}\n```",
    ])


def budget_left(ledger: Ledger) -> str:
    return (f"Budget left: {max(0, ledger.tokens_left())} of {ledger.token_budget} tokens, "
            f"{max(0, ledger.max_evaluations - ledger.evaluations)} of {ledger.max_evaluations} evaluations, "
            f"{max(0.0, ledger.max_wall_time_s - ledger.elapsed_s()):.0f} s of {ledger.max_wall_time_s:.0f} s.")


def attempt_report(attempt: Attempt, result: dict | None, labels: dict[str, str],
                   ceiling_tbs: float | None = None) -> str:
    """An evaluation as a member reads it: the verdict, the per-workload table, and for a failure the
    checker's (or the compiler's) own words."""
    head = f"{attempt.kind} {attempt.attempt_id}: {attempt.status}"
    if attempt.geomean is not None:
        noise = "" if attempt.noise is None else f", noise {100 * attempt.noise:.1f}%"
        head += f"; geomean speedup {attempt.geomean:.3f}x{noise}"
    parts = [head]
    results = EvalResult.from_json(result).results if result else []
    if results:
        parts.append(report.format_table(results, labels, "yours", ceiling_tbs if attempt.kind == "benchmark"
                                          else None, failure_lines=False))
        failed = [r for r in results if r.status != Status.PASSED and r.detail]
        for r in failed[:3]:
            detail = r.detail if len(r.detail) <= MAX_FAILURE_CHARS else (
                r.detail[:MAX_FAILURE_CHARS] + f"\n... [{len(r.detail) - MAX_FAILURE_CHARS} more characters]")
            parts.append(f"{r.uuid[:8]} {r.status}: {detail}")
        if len(failed) > 3:
            parts.append(f"({len(failed) - 3} more failed workloads)")
    elif attempt.failure:
        parts.append(attempt.failure[:MAX_FAILURE_CHARS])
    return "\n".join(parts)


def starting_kernel(task: Task, workspace: Workspace, labels: dict[str, str], ceiling_tbs: float | None) -> str:
    best = workspace.best()
    if best is None:
        seed = (task.folder / "seed_triton.py").read_text()
        return ("## No verified kernel yet; the task's seed kernel (simple and correct) to start from\n"
                f"```python\n{seed.rstrip()}\n```")
    result = workspace.result_json(best.attempt_id)
    kernel = workspace.kernel_path(best.attempt_id)
    return (f"## The team's best verified kernel ({best.attempt_id}, by {best.role}, {kernel.name})\n"
            f"{attempt_report(best, result, labels, ceiling_tbs)}\n"
            f"```{FENCE.get(kernel.suffix, '')}\n{kernel.read_text().rstrip()}\n```")


def state_brief(task: Task, workspace: Workspace, ledger: Ledger, progress: Progress, group_sizes: dict[str, int],
                labels: dict[str, str], ceiling_tbs: float | None) -> str:
    """The part of a member's brief that changes with every turn."""
    groups = ", ".join(f"{g}: {n} workloads" for g, n in group_sizes.items())
    return "\n\n".join([budget_left(ledger), f"Progress: {progress.report()}\nWorkload groups: {groups}",
                        starting_kernel(task, workspace, labels, ceiling_tbs)])


def count_tokens(text: str, model: str = "gpt-4o-mini") -> int:
    """Tokens of a text as litellm counts them for the model (its tokenizer, offline)."""
    from evoteam.llm import _litellm

    return int(_litellm().token_counter(model=model, text=text))


def main(argv: list[str] | None = None) -> int:
    from evoteam import hardware
    from evoteam.task import available_tasks

    parser = argparse.ArgumentParser(prog="python -m evoteam.team.brief", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True, choices=available_tasks())
    parser.add_argument("--hardware", default="h200", choices=hardware.available())
    parser.add_argument("--baseline", default="auto", help="the baseline's name (task.baseline)")
    parser.add_argument("--model", default="gpt-4o-mini", help="whose tokenizer counts the brief's size")
    args = parser.parse_args(argv)
    target = Target.resolve(args.task, args.hardware, executor=None)  # described, not evaluated: any target
    text = task_brief(target, args.baseline)
    print(text)
    print(f"\n[the brief of {args.task} on {args.hardware}: {count_tokens(text, args.model)} tokens "
          f"({args.model}'s tokenizer), {len(text)} characters]")
    return 0


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main)
