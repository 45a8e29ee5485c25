"""executor=local with several GPUs: one judge per device, never two evaluations on one device, and work of
one evaluation at a time always on the first device. (On this CPU machine the devices are named, not used:
the contract under test is the scheduling, and each evaluation's CUDA_VISIBLE_DEVICES.)"""

import threading

from evoteam.harness.executor import DevicePool, LocalExecutor
from evoteam.harness.model import EvalRequest, Status
from evoteam.task import load_task

from conftest import REPO

CANDIDATE = str(REPO / "tests" / "data" / "candidates" / "mla_torch.py")


def _request() -> EvalRequest:
    uuid = load_task("mla_decode").scaled_workloads("small")[0].uuid
    return EvalRequest(task="mla_decode", hardware="cpu", solution=CANDIDATE, workloads=[uuid], scale="small",
                       warmup=0, reps=2)


def test_one_evaluation_per_device_and_the_first_device_when_alone():
    executor = LocalExecutor(pool=DevicePool(["0", "1"]))
    alone = executor(_request(), 600)
    assert alone.results[0].status == Status.PASSED and alone.placement.gpu == "0"
    placements = []
    threads = [threading.Thread(target=lambda: placements.append(executor(_request(), 600).placement))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by_gpu: dict[str, list] = {}
    for p in placements:
        by_gpu.setdefault(p.gpu, []).append((p.started, p.ended))
    assert set(by_gpu) == {"0", "1"}  # both devices worked
    for spans in by_gpu.values():
        spans.sort()
        assert all(a[1] <= b[0] + 0.05 for a, b in zip(spans, spans[1:])), spans
    assert max(p.queue_s for p in placements) > 0  # the third waited for a free device, and says so
