"""Measurements of an inherited kernel shared between runs of the same settings: the presets of an equal-budget
comparison (`python -m evoteam -m team=single,fixed4,evolving`) start from the champion measured once, by the
first of them, instead of once each. Every preset then starts from the very same figures, and where no team
measures a kernel the final tables agree (evoteam/team/runner.py `uncontested`).

A measurement is keyed by what decides it: the kernel file's content and every field of the evaluation request
but the file's path (task, target, scale, workloads, timing mode, baseline, rounds, trials, sandbox, ...). Only
an evaluation whose every workload passed is kept, and for `max_age_hours` (a machine's timings drift between
starts). The store is a folder of JSON files in evoteam's cache folder (`resources.cache_root()`), written by the
trusted run process only; candidates never see it (the sandbox shows them their scratch folder alone).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from evoteam.harness.model import EvalRequest, EvalResult, Status
from evoteam.resources import cache_root

DEFAULT_MAX_AGE_HOURS = 12.0


def default_folder() -> Path:
    return cache_root() / "shared_measurements"


def measurement_key(request: EvalRequest) -> str:
    fields = asdict(request)
    fields.pop("solution")
    fields.pop("workload_timeout_s")  # a limit, not part of what is measured
    fields["solution_sha256"] = hashlib.sha256(Path(request.solution).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:32]


class SharedMeasurements:
    def __init__(self, folder: Path | None = None, max_age_hours: float = DEFAULT_MAX_AGE_HOURS):
        self.folder = Path(folder) if folder is not None else default_folder()
        self.max_age_s = max_age_hours * 3600.0

    def get(self, request: EvalRequest) -> tuple[EvalResult, float] | None:
        """The stored result of this request and its age in seconds, if one is fresh enough."""
        if self.max_age_s <= 0:
            return None
        path = self.folder / f"{measurement_key(request)}.json"
        try:
            entry = json.loads(path.read_text())
            result = EvalResult.from_json(entry["result"])
            age = time.time() - float(entry["at"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # none, or unreadable: measured afresh (and written again)
        if not 0 <= age <= self.max_age_s or {r.uuid for r in result.results} != set(request.workloads):
            return None
        return result, age

    def put(self, request: EvalRequest, result: EvalResult, run_dir: str = "") -> None:
        if self.max_age_s <= 0 or not result.results or any(r.status != Status.PASSED for r in result.results):
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{measurement_key(request)}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed: a reader sees all or nothing
        tmp.write_text(json.dumps({"at": time.time(), "run_dir": run_dir, "result": result.to_json()}))
        tmp.replace(path)

    def reusing(self, evaluate, run_dir: str = "", log=lambda line: None):
        """`evaluate` (request, timeout_s) -> EvalResult, answered from the store where it holds the request."""
        def shared(request: EvalRequest, timeout_s: float) -> EvalResult:
            hit = self.get(request)
            if hit is not None:
                result, age = hit
                log(f"shared measurement: {len(result.results)} workload(s) of {Path(request.solution).name} as an "
                    f"earlier run of the same settings measured them {age / 60:.0f} min ago")
                result.log_tail = f"[shared measurement, taken {age:.0f} s after it was made]\n{result.log_tail}"
                return result
            result = evaluate(request, timeout_s)
            self.put(request, result, run_dir)
            return result

        return shared
