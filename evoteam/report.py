"""Per-workload result rows, their summary (geometric mean, wins) and a plain-text table."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class ResultRow:
    workload: str  # uuid
    shape: str  # short human description of the var axes
    status: str  # PASSED or the failed check
    baseline: str
    timing_mode: str
    baseline_ms: float | None = None
    candidate_ms: float | None = None
    detail: str = ""

    @property
    def speedup(self) -> float | None:
        if self.status != "PASSED" or not self.baseline_ms or not self.candidate_ms:
            return None
        return self.baseline_ms / self.candidate_ms

    def to_json(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


@dataclass(frozen=True)
class Summary:
    workloads: int
    passed: int
    wins: int
    geomean_speedup: float | None  # over workloads that passed
    worst_speedup: float | None


def summarize(rows: list[ResultRow]) -> Summary:
    speedups = [r.speedup for r in rows if r.speedup is not None]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    return Summary(workloads=len(rows), passed=sum(r.status == "PASSED" for r in rows),
                   wins=sum(s > 1.0 for s in speedups), geomean_speedup=geomean,
                   worst_speedup=min(speedups) if speedups else None)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: list[ResultRow], candidate: str) -> str:
    header = ["workload", "shape", "status", f"{rows[0].baseline if rows else 'baseline'} ms",
              f"{candidate} ms", "speedup"]
    body = [[r.workload[:8], r.shape, r.status, _fmt(r.baseline_ms, ".4g"), _fmt(r.candidate_ms, ".4g"),
             _fmt(r.speedup, ".3f") + ("x" if r.speedup else "")] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    s = summarize(rows)
    mode = rows[0].timing_mode if rows else "-"
    lines.append(f"{s.passed}/{s.workloads} passed; wins {s.wins}; geomean speedup "
                 f"{_fmt(s.geomean_speedup, '.3f')}x; worst {_fmt(s.worst_speedup, '.3f')}x; timing mode {mode}")
    return "\n".join(lines)
