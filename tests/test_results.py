"""python -m evoteam.results (and --run): runs of evoteam.bench side by side, with each run's summary."""

import json
import math
from pathlib import Path

from evoteam.task import load_task

from conftest import run_module

ROOT = Path(__file__).resolve().parent.parent


def bench_json(path, uuids, baseline_ms, candidate_ms, statuses=None):
    results = []
    for i, uuid in enumerate(uuids):
        status = (statuses or {}).get(uuid, "PASSED")
        r = {"uuid": uuid, "status": status}
        if status == "PASSED":
            # the fields evoteam.bench --json writes: noise is the repeat's relative difference (1%, 2%, ...)
            r.update(baseline_ms=baseline_ms[i], candidate_ms=candidate_ms[i],
                     candidate_repeat_ms=candidate_ms[i] * (1 + 0.01 * (i + 1)),
                     floor_ms=0.001 * (i + 1), bandwidth_tbs=0.5 * (i + 1))
        results.append(r)
    path.write_text(json.dumps({"request": {"task": "mla_decode", "hardware": "h200"}, "results": results}))
    return path


def run_table(*args):
    return run_module(list(args), module="evoteam.results", cwd=ROOT, timeout=120)


def test_runs_side_by_side(tmp_path):
    uuids = [w.uuid for w in load_task("mla_decode").workloads[:3]]
    a = bench_json(tmp_path / "a.json", uuids[:2], [0.02, 0.04], [0.01, 0.05])
    b = bench_json(tmp_path / "b.json", uuids[2:], [0.03], [0.03])
    c = bench_json(tmp_path / "c.json", uuids, [0.02, 0.04, 0.03], [0.04, 0.04, 0.03],
                   statuses={uuids[2]: "mismatch"})
    out = run_table("--run", f"one={a},{b}", "--run", f"two={c}", "--largest", "2")
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith(f"| {uuids[0][:8]}")]
    assert len(rows) == 1 and "2.000x" in rows[0] and "0.500x" in rows[0]
    summary = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith(("| one", "| two"))}
    one = 2.0 * 0.8 * 1.0
    assert f"| 3/3 | {one ** (1 / 3):.3f}x | 1 | 0.800x ({uuids[1][:8]}) | 2.0% |" in summary["one"]
    assert f"| 2/3 | {math.sqrt(0.5):.3f}x | 0 | 0.500x ({uuids[0][:8]}) | 2.0% |" in summary["two"]
    # the 2 largest by floor in run one (0.002, then 0.001): 1.0 and 0.5 TB/s of 4.23
    assert f"{100 * 0.5 / 4.23:.0f}% / {100 * 0.75 / 4.23:.0f}% |" in summary["one"]


def test_unreadable_run_is_one_line(tmp_path):
    out = run_table("--run", f"x={tmp_path / 'missing.json'}")
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "cannot read" in out.stderr and "evoteam.bench --json" in out.stderr


def test_plain_table_takes_the_reports_hardware(tmp_path):
    uuids = [w.uuid for w in load_task("mla_decode").workloads[:2]]
    a = bench_json(tmp_path / "a.json", uuids, [0.02, 0.04], [0.01, 0.05])
    out = run_table(str(a))
    assert out.returncode == 0, out.stderr
    assert "2.000x" in out.stdout and "0.800x" in out.stdout and "4.23" in out.stdout


def test_bad_input_is_one_line(tmp_path):
    missing = run_table(str(tmp_path / "missing.json"))
    assert missing.returncode != 0 and missing.stderr.strip().count("\n") == 0
    assert "cannot read" in missing.stderr
    neither = run_table()
    assert neither.returncode == 2 and "give either result files or --run" in neither.stderr
    assert "Traceback" not in neither.stderr + missing.stderr
