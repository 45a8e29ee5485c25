"""Baseline timings cached per (hardware fingerprint, library version, timing mode, baseline,
workload, calls per timed interval and how they were chosen), so quick evaluations need not re-time the library kernel;
re-measured on request.

Reports that compare a candidate with a baseline always time both side by side; the cache is
for the agents' quick feedback loop (EvalRequest.use_baseline_cache).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from evoteam.resources import cache_root
from evoteam.schema import append_journal, read_journal


def default_path() -> Path:
    return cache_root() / "baseline_timings.jsonl"


def hardware_fingerprint(device: str) -> str:
    import torch

    if not str(device).startswith("cuda"):
        import platform

        return f"cpu:{platform.machine()}:{os.cpu_count()}"
    props = torch.cuda.get_device_properties(torch.device(device))
    driver = getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None) or "?"
    return f"{props.name}:sm{props.major}{props.minor}:{props.multi_processor_count}mp:{props.total_memory >> 20}MiB:rt{driver}"


@dataclass(frozen=True)
class Key:
    fingerprint: str
    library_version: str
    timing_mode: str
    baseline: str
    workload: str
    batch: int = 0  # calls per timed interval: a batch of one costs a call more than a batch of many (CPU)
    batch_rule: str = ""  # how the judge chose that batch (CPU); entries of another rule never match


def _key_str(key: Key) -> str:
    return json.dumps(asdict(key), sort_keys=True)


class BaselineCache:
    def __init__(self, path: Path | None = None):
        self.path = path or default_path()

    def _load(self) -> dict[str, float]:
        entries: dict[str, float] = {}
        for obj in read_journal(self.path):
            entries[_key_str(Key(**obj["key"]))] = float(obj["median_ms"])
        return entries

    def get(self, key: Key) -> float | None:
        return self._load().get(_key_str(key))

    def batches(self, key: Key) -> set[int]:
        """The batches with a cached time for `key`'s workload, mode and library, whatever `key`'s own batch."""
        want = replace(key, batch=0)
        keys = (Key(**obj["key"]) for obj in read_journal(self.path))
        return {k.batch for k in keys if k.batch and replace(k, batch=0) == want}

    def put(self, key: Key, median_ms: float) -> None:
        # Appending keeps the file valid if interrupted; the last entry for a key wins.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_journal(self.path, {"key": asdict(key), "median_ms": median_ms})
