"""Every compared figure with its uncertainty, by scipy.stats (its bootstrap and permutation test, no resampling of
our own).

Speedups are ratios: they are compared on a log scale (a geometric mean is the exponential of a mean of logs), so
that 2x faster and 2x slower are equally far from 1.0x.

- `geomean_interval`: a geometric mean with its 95% bootstrap interval (BCa where it is defined, else percentile).
- (per workload, in the judge: evoteam.harness.timing.median_interval, the order-statistic interval of the median
  of the timing rounds' ratios)
- `fast_p`: the share of workloads correct and faster than p times the baseline (KernelBench's fast_p).
- `paired_difference`: two configurations run on the same seeds: the geometric mean of their per-seed ratios, its
  bootstrap interval and a permutation test's p-value, and a verdict that says "within noise" unless the interval
  excludes 1.0x and the test rejects no difference at 5% (which takes at least 5 pairs).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy

CONFIDENCE = 0.95
RESAMPLES = 9999
FAST_P = (1.0, 1.1, 1.25)


@dataclass(frozen=True)
class Estimate:
    """A figure with its interval: `value` (a geometric mean, a median), its 95% interval, and from how many."""

    value: float | None
    low: float | None
    high: float | None
    n: int
    method: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    def text(self, spec: str = ".3f", suffix: str = "x") -> str:
        if self.value is None:
            return "-"
        if self.low is None or self.high is None:
            return f"{self.value:{spec}}{suffix}"
        return f"{self.value:{spec}}{suffix} [{self.low:{spec}}, {self.high:{spec}}]"


def _positive(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and v > 0 and math.isfinite(v)]


def geomean_interval(values: Iterable[float | None], seed: int = 0, confidence: float = CONFIDENCE) -> Estimate:
    """The geometric mean of the positive values with its bootstrap interval (None where fewer than 2 values)."""
    xs = _positive(values)
    if not xs:
        return Estimate(None, None, None, 0)
    logs = numpy.log(numpy.array(xs))
    value = float(numpy.exp(logs.mean()))
    if len(xs) < 2 or float(logs.std()) == 0.0:
        return Estimate(value, value if len(xs) > 1 else None, value if len(xs) > 1 else None, len(xs),
                        "all equal" if len(xs) > 1 else "one value")
    low, high, method = _bootstrap_mean(logs, seed, confidence)
    return Estimate(value, float(numpy.exp(low)), float(numpy.exp(high)), len(xs), method)


def _bootstrap_mean(logs: numpy.ndarray, seed: int, confidence: float) -> tuple[float, float, str]:
    from scipy import stats

    rng = numpy.random.default_rng(seed)
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa's degenerate cases: the percentile interval is taken instead
            result = stats.bootstrap((logs,), numpy.mean, confidence_level=confidence, n_resamples=RESAMPLES,
                                     method=method, random_state=rng)
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high, f"bootstrap {method}"
    return float(logs.min()), float(logs.max()), "range"


def fast_p(speedups: Sequence[float | None], p: float) -> float | None:
    """The share of workloads correct (a speedup is given only where correct) and faster than p times the
    baseline; None for no workloads."""
    if not speedups:
        return None
    return sum(1 for s in speedups if s is not None and s > p) / len(speedups)


@dataclass(frozen=True)
class Paired:
    """b against a on the same seeds: the geometric mean of b/a per seed with its interval, a permutation test's
    two-sided p-value (signs of the per-seed log ratios flipped at random), and the verdict."""

    ratio: Estimate
    p_value: float | None
    verdict: str  # "within noise", "b better", "b worse", or "too few pairs"

    def to_json(self) -> dict:
        return {"ratio": self.ratio.to_json(), "p_value": self.p_value, "verdict": self.verdict}


def paired_difference(a: Sequence[float], b: Sequence[float], seed: int = 0,
                      confidence: float = CONFIDENCE) -> Paired:
    """Two configurations' figures (higher is better) on the same seeds, in the same order."""
    pairs = [(x, y) for x, y in zip(a, b) if x and y and x > 0 and y > 0]
    ratios = [y / x for x, y in pairs]
    ratio = geomean_interval(ratios, seed, confidence)
    if len(pairs) < 2:
        return Paired(ratio, None, "too few pairs")
    from scipy import stats

    logs = numpy.log(numpy.array(ratios))
    if float(numpy.abs(logs).max()) == 0.0:
        return Paired(ratio, 1.0, "within noise")
    result = stats.permutation_test((logs,), numpy.mean, permutation_type="samples", n_resamples=RESAMPLES,
                                    alternative="two-sided", random_state=numpy.random.default_rng(seed))
    p = float(result.pvalue)
    # Both must say so: the interval excludes 1.0x and the permutation test rejects "no difference" at the level
    # the interval has. A bootstrap of few pairs is too narrow (two pairs give the range of two ratios); the sign
    # test cannot reach 5% below 5 pairs (its smallest p is 2 / 2^n), so with fewer it never calls a difference.
    significant = p < 1.0 - confidence
    if significant and ratio.low is not None and ratio.low > 1.0:
        verdict = "b better"
    elif significant and ratio.high is not None and ratio.high < 1.0:
        verdict = "b worse"
    else:
        verdict = "within noise"
    return Paired(ratio, p, verdict)
