"""scripts/best_baseline.py: a candidate against a library at its best, per workload the faster configuration."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import best_baseline  # noqa: E402


def _run(backend: str, speedups: dict[str, float | None], mode: str = "graph", solution: str = "champ.py") -> dict:
    """A bench JSON as evoteam.bench writes it (the fields the script reads), one result per workload."""
    results = [{"uuid": uuid, "status": "PASSED" if s else "INCORRECT_NUMERICAL", "speedup": s,
                "speedup_low": s and s * 0.99, "speedup_high": s and s * 1.01, "baseline": f"flashinfer[{backend}]"}
               for uuid, s in speedups.items()]
    return {"request": {"task": "mla_decode", "solution": solution, "timing_mode": mode, "scale": "full",
                        "baseline": "flashinfer", "baseline_options": {"backend": backend, "plan": "cached"}},
            "results": results}


def test_the_bar_is_the_configuration_the_candidate_fares_worst_against_per_workload():
    fa2 = _run("fa2", {"aaaa1111": 1.50, "bbbb2222": 0.90, "cccc3333": 1.20})
    fa3 = _run("fa3", {"aaaa1111": 1.10, "bbbb2222": 1.30, "cccc3333": None})
    report = best_baseline.best_of({"fa2": fa2, "fa3": fa3})
    rows = {r["uuid"]: r for r in report["rows"]}
    assert (rows["aaaa1111"]["bar"], rows["aaaa1111"]["speedup"]) == ("fa3", 1.10)
    assert (rows["bbbb2222"]["bar"], rows["bbbb2222"]["speedup"]) == ("fa2", 0.90)
    # failed against one configuration: no figure, and it is not counted as timed
    assert rows["cccc3333"]["speedup"] is None and rows["cccc3333"]["failed"] == {"fa3": "INCORRECT_NUMERICAL"}
    s = report["summary"]
    assert s["timed"] == 2 and s["workloads"] == 3 and s["worst_workload"] == "bbbb2222"
    assert s["geomean_speedup"] == pytest.approx((1.10 * 0.90) ** 0.5)
    assert s["under_0.95"] == 1 and s["bars"] == {"fa2": 1, "fa3": 1}


def test_runs_that_are_not_comparable_are_refused():
    with pytest.raises(ValueError, match="timing_mode"):
        best_baseline.best_of({"a": _run("fa2", {"aaaa1111": 1.0}), "b": _run("fa3", {"aaaa1111": 1.0}, mode="events")})
    with pytest.raises(ValueError, match="solution"):
        best_baseline.best_of({"a": _run("fa2", {"aaaa1111": 1.0}), "b": _run("fa3", {"aaaa1111": 1.0}, solution="x")})
    with pytest.raises(ValueError, match="workloads"):
        best_baseline.best_of({"a": _run("fa2", {"aaaa1111": 1.0}), "b": _run("fa3", {"bbbb2222": 1.0})})


def test_the_command_prints_the_table_names_each_bar_and_writes_json(tmp_path):
    paths = []
    for backend, speedups in (("fa2", {"aaaa1111": 1.5, "bbbb2222": 1.2}), ("fa3", {"aaaa1111": 1.3, "bbbb2222": 1.4})):
        path = tmp_path / f"{backend}.json"
        path.write_text(json.dumps(_run(backend, speedups)))
        paths.append(str(path))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "best_baseline.py"), *paths, "--json",
                           str(tmp_path / "best.json")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split()[0] == "aaaa1111" and lines[1].split()[3] == "fa3" and "1.300x" in lines[1]
    assert lines[2].split()[3] == "fa2" and "1.200x" in lines[2]
    assert "geomean 1.249x" in lines[-1] and "the bar: fa2 1, fa3 1" in lines[-1]
    assert json.loads((tmp_path / "best.json").read_text())["summary"]["timed"] == 2
    # the same configuration twice, or a file that is not a bench JSON: one line, exit 2
    twice = subprocess.run([sys.executable, str(REPO / "scripts" / "best_baseline.py"), paths[0], paths[0]],
                           capture_output=True, text=True, cwd=REPO)
    assert twice.returncode == 2 and "one run per baseline configuration" in twice.stderr
    (tmp_path / "bad.json").write_text("{}")
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "best_baseline.py"), str(tmp_path / "bad.json")],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "not a bench JSON" in bad.stderr
