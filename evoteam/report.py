"""Per-workload results as a table, with the summary figures (geometric mean, wins, worst)."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoteam.harness.model import Status, WorkloadResult, geomean


@dataclass(frozen=True)
class Summary:
    workloads: int
    passed: int
    wins: int
    geomean_speedup: float | None  # over workloads that passed and were timed
    worst_speedup: float | None
    worst_workload: str | None
    max_noise: float | None
    # the geomean's 95% bootstrap interval over the workloads (evoteam.uncertainty.geomean_interval); the same names,
    # prefixed final_, in MLflow (evoteam.tracking.tracker.final_metrics) and compare's table (<budget>_geomean_ci_low)
    geomean_ci_low: float | None = None
    geomean_ci_high: float | None = None
    # KernelBench's fast_p: the share of workloads correct and faster than p times the baseline, p in FAST_P
    fast_p: dict = field(default_factory=dict)

    def line(self) -> str:
        interval = (f" [{self.geomean_ci_low:.3f}, {self.geomean_ci_high:.3f}]"
                    if self.geomean_ci_low is not None and self.geomean_ci_high is not None else "")
        fast = ", ".join(f"fast_{p:g} {v:.2f}" for p, v in self.fast_p.items() if v is not None)
        return (f"{self.passed}/{self.workloads} passed; wins {self.wins}; geomean speedup "
                f"{_fmt(self.geomean_speedup, '.3f', 'x')}{interval}; worst {_fmt(self.worst_speedup, '.3f', 'x')}"
                f"{' (' + self.worst_workload[:8] + ')' if self.worst_workload else ''}; "
                f"max noise {_fmt(None if self.max_noise is None else 100 * self.max_noise, '.1f', '%')}"
                f"{'; ' + fast if fast else ''}")


def summarize(results: list[WorkloadResult]) -> Summary:
    from evoteam.uncertainty import FAST_P, fast_p, geomean_interval

    timed = [r for r in results if r.speedup is not None]
    mean = geomean(r.speedup for r in timed)
    worst = min(timed, key=lambda r: r.speedup) if timed else None
    noises = [r.noise for r in results if r.noise is not None]
    interval = geomean_interval([r.speedup for r in timed])
    # a speedup counts only where the workload passed (a flagged time is not a win)
    counted = [r.speedup if r.status == Status.PASSED else None for r in results]
    return Summary(workloads=len(results), passed=sum(r.status == Status.PASSED for r in results),
                   wins=sum(r.speedup > 1.0 for r in timed), geomean_speedup=mean,
                   worst_speedup=worst.speedup if worst else None, worst_workload=worst.uuid if worst else None,
                   max_noise=max(noises) if noises else None, geomean_ci_low=interval.low,
                   geomean_ci_high=interval.high,
                   fast_p={p: fast_p(counted, p) for p in FAST_P} if results else {})


CPU_NOTE = ("CPU figures: each side's single-threaded CPU time per call on one CPU, the speedup the median of "
            "per-round ratios (re-measured within about 10%), kernels under the Triton interpreter, "
            "a small problem scale; they test the platform's flow and rank nothing about GPU performance")


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def format_table(results: list[WorkloadResult], labels: dict[str, str], candidate: str,
                 bandwidth_ceiling_tbs: float | None = None, failure_lines: bool = True) -> str:
    """One row per workload; `labels` maps uuid -> a short shape description. `failure_lines`: the first
    200 characters of each failure's detail below the table."""
    baseline = next((r.baseline for r in results if r.baseline), None)
    header = ["workload", "shape", "status", "baseline ms", f"{candidate} ms", "speedup", "noise"]
    if bandwidth_ceiling_tbs:
        header.append(f"% of {bandwidth_ceiling_tbs:g} TB/s")
    body = []
    for r in results:
        row = [r.uuid[:8], labels.get(r.uuid, ""), r.status, _fmt(r.baseline_ms, ".4g"), _fmt(r.candidate_ms, ".4g"),
               _fmt(r.speedup, ".3f", "x"), _fmt(None if r.noise is None else 100 * r.noise, ".1f", "%")]
        if bandwidth_ceiling_tbs:
            row.append(_fmt(None if r.bandwidth_tbs is None else 100 * r.bandwidth_tbs / bandwidth_ceiling_tbs,
                            ".0f", "%"))
        body.append(row)
    widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    modes = sorted({r.timing_mode for r in results if r.timing_mode})
    # where no workload reached the baseline (every one failed first), say so rather than "baseline baseline"
    lines.append(f"baseline {baseline or 'not run'}; timing mode {', '.join(modes) or 'none (nothing was timed)'}")
    if any(m.startswith(("cputime", "wallclock (no cgroup")) for m in modes):
        lines.append(CPU_NOTE)
    lines.append(summarize(results).line())
    failures = [r for r in results if r.status != Status.PASSED] if failure_lines else []
    for r in failures[:10]:
        lines.append(f"  {r.uuid[:8]} {r.status}: {r.detail[:200]}")
    return "\n".join(lines)


def format_phases(phases: dict, wall_s: float) -> str:
    """Where an evaluation's wall time went: one line per phase, largest first, with its share of `wall_s`."""
    if not phases:
        return "phases: none recorded"
    lines = [f"where the {wall_s:.1f} s went (phases sum to {sum(phases.values()):.1f} s):"]
    for name, seconds in sorted(phases.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {seconds:8.2f} s {100 * seconds / max(wall_s, 1e-9):5.1f}%  {name}")
    return "\n".join(lines)
