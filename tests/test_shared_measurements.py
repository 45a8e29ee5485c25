"""An inherited kernel's measurement shared between runs of the same settings: answered only for the same kernel
content and request, only when every workload passed, only while fresh."""

import json
import time
from dataclasses import replace

from evoteam.harness.model import EvalRequest, EvalResult, Status, WorkloadResult
from evoteam.team.shared_measurements import SharedMeasurements, measurement_key


def _request(tmp_path, source="def run(): pass\n", name="a.py", **fields):
    path = tmp_path / name
    path.write_text(source)
    return EvalRequest(task="mla_decode", hardware="h200", solution=str(path), workloads=["w1", "w2"], **fields)


def _result(*statuses):
    return EvalResult(results=[WorkloadResult(uuid=f"w{i + 1}", status=s, baseline_ms=1.0, candidate_ms=0.5)
                               for i, s in enumerate(statuses)])


def test_a_measurement_is_shared_for_the_same_kernel_and_request_only(tmp_path):
    store = SharedMeasurements(tmp_path / "store")
    calls = []

    def evaluate(request, timeout_s):
        calls.append(request.solution)
        return _result(Status.PASSED, Status.PASSED)

    shared = store.reusing(evaluate)
    first = shared(_request(tmp_path), 60)
    # another run's copy of the same kernel (another path), same settings: no second measurement
    again = shared(_request(tmp_path, name="b.py"), 60)
    assert len(calls) == 1 and again.to_json()["results"] == first.to_json()["results"]
    assert again.log_tail.startswith("[shared measurement")
    # what decides a measurement decides the key: the kernel's content, the timing mode, the workloads, the rounds
    base = _request(tmp_path)
    for other in (_request(tmp_path, source="def run(): return 1\n", name="c.py"), replace(base, timing_mode="events"),
                  replace(base, workloads=["w1"]), replace(base, reps=5), replace(base, baseline="flashinfer")):
        assert measurement_key(other) != measurement_key(base)
    assert measurement_key(replace(base, workload_timeout_s=1.0)) == measurement_key(base)  # a limit only
    shared(_request(tmp_path, source="def run(): return 1\n", name="c.py"), 60)
    assert len(calls) == 2


def test_failed_stale_or_disabled_measurements_are_not_shared(tmp_path):
    store = SharedMeasurements(tmp_path / "store")
    request = _request(tmp_path)
    store.put(request, _result(Status.PASSED, Status.TIMEOUT))
    assert store.get(request) is None  # one workload failed: never shared
    store.put(request, _result(Status.PASSED, Status.PASSED))
    assert store.get(request) is not None
    (path,) = (tmp_path / "store").glob("*.json")
    entry = json.loads(path.read_text())
    entry["at"] = time.time() - 13 * 3600  # older than the 12 hours it is kept for
    path.write_text(json.dumps(entry))
    assert store.get(request) is None
    path.write_text("{not json")
    assert store.get(request) is None  # unreadable: measured afresh
    off = SharedMeasurements(tmp_path / "off", max_age_hours=0)
    off.put(request, _result(Status.PASSED, Status.PASSED))
    assert off.get(request) is None and not (tmp_path / "off").exists()
