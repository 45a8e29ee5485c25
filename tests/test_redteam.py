"""The red-team suite's CPU cases through the real harness (tests/redteam/): every cheat caught,
every fault kept to its workload, every escape blocked. One test per case; the table a run prints
is `python tests/redteam/run.py --hardware cpu` (the GPU's: scripts/gpu_integrity_report.sh OUT redteam)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from cases import CASES, cases_for  # noqa: E402
from run import make_context, run_case  # noqa: E402

CPU_CASES = cases_for("cpu")


def test_the_suite_covers_every_class_with_thirty_cases_or_more():
    classes = {c.cls for c in CASES}
    assert len(CASES) >= 30 and len(CPU_CASES) >= 30
    assert classes == {"baseline/reference", "reuse", "partial work", "escaped work", "tampering",
                       "predicting inputs", "faults", "sandbox escape"}


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    ctx = make_context("cpu", tmp_path_factory.mktemp("redteam"))
    yield ctx
    ctx.close()


@pytest.mark.slow
@pytest.mark.parametrize("case", CPU_CASES, ids=[c.name for c in CPU_CASES])
def test_case_is_caught(case, context):
    row = run_case(case, context)
    assert row.caught, row.line()
