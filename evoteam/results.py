"""Print the per-workload table and summary of saved bench results.

    python -m evoteam.results REPORT.json|TRACES.jsonl [...]   (files are merged in order)
    python -m evoteam.results --run run1=A.json[,B.json] --run run2=C.json[,D.json] [--largest 8]

A bench --json report carries everything; FlashInfer-Trace lines carry status and both latencies
(not the noise or bandwidth columns).

With --run: runs side by side (the same command run twice, or two timing modes), markdown. A run is
one or more bench JSON files (e.g. two halves of a workload set) read together. Speedup is
baseline_ms / candidate_ms of the same run (side by side in one worker); "% BW" is the candidate's
achieved bandwidth (compulsory bytes / its time) over the hardware spec sheet's copy ceiling. --largest
N also reports each run's worst and mean % BW over the N workloads with the most compulsory bytes."""

import argparse
import json
import sys
from pathlib import Path

from evoteam import hardware, report
from evoteam.errors import EXIT_BAD_INPUT, UserError
from evoteam.harness.model import WorkloadResult
from evoteam.schema import load_traces
from evoteam.task import load_task, shape_label


def results_from(path: Path) -> tuple[list[WorkloadResult], str, str | None]:
    """(results, task name, hardware name or None) of a bench --json report or a FlashInfer-Trace file."""
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            request = data["request"]
            return [WorkloadResult.from_json(r) for r in data["results"]], request["task"], request.get("hardware")
        traces = load_traces(path)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"cannot read {path} ({exc}); give a JSON report of evoteam.bench --json "
                         "or a FlashInfer-Trace .jsonl file") from None
    results, task = [], ""
    for trace in traces:
        task = "mla_decode" if trace.definition.startswith("mla") else "kda_prefill"
        ev = trace.evaluation or trace.check  # a check-only trace keeps its verdict in `check`
        if ev is None:
            continue
        status, _, detail = ev.log.partition(": ")
        mode = ev.log.rsplit("timing ", 1)[-1] if "timing " in ev.log else ""
        baseline = ev.log.split("| baseline ", 1)[-1].split(",", 1)[0] if "| baseline " in ev.log else ""
        perf = ev.performance
        results.append(WorkloadResult(uuid=trace.workload.uuid, status=status, detail=detail, baseline=baseline,
                                      timing_mode=mode, baseline_ms=perf.reference_latency_ms if perf else None,
                                      candidate_ms=perf.latency_ms if perf else None))
    return results, task, None


def load_run(spec: str) -> tuple[str, dict, list[WorkloadResult]]:
    """(label, {"task", "hardware"} of the first file, results of all files) of LABEL=FILE[,FILE...]:
    bench --json reports (they name their hardware, which the % BW column needs)."""
    label, _, files = spec.partition("=")
    if not files:
        raise UserError(f"--run {spec!r}: expected LABEL=FILE[,FILE...]")
    request, results = None, []
    for name in files.split(","):
        rs, task_name, hardware_name = results_from(Path(name))
        if hardware_name is None:
            raise UserError(f"--run {label}: {name} names no hardware; give a JSON file written by evoteam.bench --json")
        request = request or {"task": task_name, "hardware": hardware_name}
        results += rs
    return label, request, results


def compare_runs(specs: list[str], largest_n: int) -> int:
    runs = [load_run(spec) for spec in specs]
    request, first = runs[0][1], runs[0][2]
    task = load_task(request["task"])
    ceiling = hardware.load_spec(request["hardware"]).bandwidth_ceiling_tbs
    by_uuid = {w.uuid: w for w in task.scaled_workloads("full")}
    order = [r.uuid for r in first]
    tables = [{r.uuid: r for r in results} for _, _, results in runs]

    def percent_of_ceiling(r: WorkloadResult | None) -> float | None:
        return 100 * r.bandwidth_tbs / ceiling if r is not None and r.bandwidth_tbs and ceiling else None

    head = ["workload", "shape"]
    for label, _, _ in runs:
        head += [f"{label} baseline ms", f"{label} candidate ms", f"{label} speedup"]
    head += ["% BW (" + runs[0][0] + ")"]
    print(f"task {request['task']} on {request['hardware']}; timing {first[0].timing_mode}; "
          f"baseline {first[0].baseline}; copy ceiling {ceiling} TB/s\n")
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for uuid in order:
        w = by_uuid.get(uuid)
        row = [uuid[:8], shape_label(w) if w else "?"]
        for table in tables:
            r = table.get(uuid)
            if r is not None and r.speedup is not None:
                row += [f"{r.baseline_ms:.4f}", f"{r.candidate_ms:.4f}", f"{r.speedup:.3f}x"]
            else:
                row += ["-", "-", r.status if r is not None else "missing"]
        bw = percent_of_ceiling(tables[0].get(uuid))
        row.append(f"{bw:.0f}%" if bw is not None else "-")
        print("| " + " | ".join(row) + " |")

    largest = sorted(order, key=lambda u: -(tables[0][u].floor_ms or 0))[:largest_n]
    print("\n| run | correct | geomean | wins | worst | max noise |" + (f" % BW, {largest_n} largest (min / mean) |" if largest else ""))
    print("| --- | --- | --- | --- | --- | --- |" + (" --- |" if largest else ""))
    for (label, _, results), table in zip(runs, tables):
        s = report.summarize(results)
        line = f"| {label} | {s.passed}/{s.workloads} | "
        if s.geomean_speedup is not None:
            line += (f"{s.geomean_speedup:.3f}x | {s.wins} | {s.worst_speedup:.3f}x ({s.worst_workload[:8]}) | "
                     f"{100 * (s.max_noise or 0):.1f}% |")
        else:
            line += "- | - | - | - |"
        if largest:
            bws = [b for b in (percent_of_ceiling(table.get(u)) for u in largest) if b is not None]
            line += f" {min(bws):.0f}% / {sum(bws) / len(bws):.0f}% |" if bws else " - |"
        print(line)
    return 0


def print_files(paths: list[str], hardware_name: str | None) -> int:
    results, task_name = [], ""
    for p in paths:
        rs, task_name, hw = results_from(Path(p))
        results += rs
        hardware_name = hardware_name or hw
    if not hardware_name:
        raise UserError("these files do not name their hardware (trace files); give --hardware, e.g. --hardware h200")
    task = load_task(task_name)
    labels = {w.uuid: shape_label(w) for w in task.workloads}
    print(report.format_table(results, labels, "candidate", hardware.load_spec(hardware_name).bandwidth_ceiling_tbs))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evoteam.results", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="bench --json reports or FlashInfer-Trace .jsonl files, merged in order")
    parser.add_argument("--run", action="append", help="LABEL=FILE[,FILE...]: runs side by side (repeat)")
    parser.add_argument("--largest", type=int, default=0, help="also report %% BW over the N largest workloads")
    parser.add_argument("--hardware", help="spec sheet for %% BW of trace files (bench reports name theirs)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if bool(args.run) == bool(args.files):
        parser.error("give either result files or --run LABEL=FILE[,FILE...], not both or neither")
    try:
        if args.run:
            return compare_runs(args.run, args.largest)
        return print_files(args.files, args.hardware)
    except UserError as exc:
        print(f"evoteam.results: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main)
