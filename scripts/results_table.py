"""Print the per-workload table and summary of saved bench results.

    python scripts/results_table.py REPORT.json|TRACES.jsonl [...]   (files are merged in order)

A bench --json report carries everything; FlashInfer-Trace lines carry status and both latencies
(not the noise or bandwidth columns)."""

import json
import sys
from pathlib import Path

from evoteam import hardware, report
from evoteam.schema import load_traces
from evoteam.task import load_task, shape_label
from evoteam.worker import WorkloadResult


def results_from(path: Path) -> tuple[list[WorkloadResult], str]:
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return [WorkloadResult.from_json(r) for r in data["results"]], data["request"]["task"]
    results, task = [], ""
    for trace in load_traces(path):
        task = "mla_decode" if trace.definition.startswith("mla") else "kda_prefill"
        ev = trace.evaluation
        status, _, detail = ev.log.partition(": ")
        mode = ev.log.rsplit("timing ", 1)[-1] if "timing " in ev.log else ""
        baseline = ev.log.split("| baseline ", 1)[-1].split(",", 1)[0] if "| baseline " in ev.log else ""
        perf = ev.performance
        results.append(WorkloadResult(uuid=trace.workload.uuid, status=status, detail=detail, baseline=baseline,
                                      timing_mode=mode, baseline_ms=perf.reference_latency_ms if perf else None,
                                      candidate_ms=perf.latency_ms if perf else None))
    return results, task


def main(paths: list[str]) -> None:
    results, task_name = [], ""
    for p in paths:
        rs, task_name = results_from(Path(p))
        results += rs
    task = load_task(task_name)
    labels = {w.uuid: shape_label(w) for w in task.workloads}
    print(report.format_table(results, labels, "candidate", hardware.load_spec("h200").bandwidth_ceiling_tbs))


if __name__ == "__main__":
    main(sys.argv[1:])
