"""scripts/gpu_check_summary.py, the table of the GPU acceptance check, on outputs written here: a red-team part
holds only if every case it set out to run was reached and came out as expected."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import gpu_check_summary  # noqa: E402


def _case(name: str, caught: bool = True) -> dict:
    return {"case": name, "expect": "fail", "statuses": ["skipped_work", "skipped_work"], "candidate_ms": [None, None],
            "caught": caught, "why": "every workload failed or was flagged", "speedups": [None, None],
            "modes": ["graph", "graph"], "second": []}


def _write(out: Path, planned: int, cases: list[dict]) -> None:
    (out / "redteam.log").write_text(f"red team: {planned} cases on h100 (full scale, workloads a, b)\n")
    (out / "redteam.json").write_text(json.dumps(cases))
    (out / "redteam_part.txt").write_text("0/4\n")


def test_a_red_team_part_cut_short_does_not_hold(tmp_path):
    _write(tmp_path, 3, [_case("a"), _case("b")])
    (row,) = gpu_check_summary.redteam_rows(tmp_path, "redteam", "GPU red team")
    assert not row.holds and "only 2 of the 3 cases reached" in row.figures


def test_a_red_team_part_holds_when_every_case_is_reached_and_caught(tmp_path):
    _write(tmp_path, 2, [_case("a"), _case("b")])
    (row,) = gpu_check_summary.redteam_rows(tmp_path, "redteam", "GPU red team")
    assert row.holds and row.figures == "2/2 as expected (part 0/4 of the rest)"
    _write(tmp_path, 2, [_case("a"), _case("b", caught=False)])
    assert not gpu_check_summary.redteam_rows(tmp_path, "redteam", "GPU red team")[0].holds
