"""scripts/partials_ab.py: the two builds of the MLA champion it writes for an A/B of the partials' dtype, and the
choice per table entry it makes from an A/B report (here a report made up with known speedups)."""

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import partials_ab  # noqa: E402

from evoteam.families import load_champion  # noqa: E402
from evoteam.task import load_module_from_path, load_task  # noqa: E402


def test_build_writes_the_champion_with_one_value_everywhere(tmp_path):
    fp16, fp32 = partials_ab.build(load_champion(partials_ab.CHAMPION), tmp_path)
    entries = len(load_champion(partials_ab.CHAMPION).dispatch)
    for path, value in ((fp16, "fp16"), (fp32, "fp32")):
        module = load_module_from_path(path, f"partials_ab_{value}")
        assert module.PARAMS["PARTIALS"] == value and len(module.DISPATCH) == entries
        assert {point["PARTIALS"] for _, point in module.DISPATCH} == {value}


def test_choose_takes_fp16_only_where_it_passed_and_won_by_the_margin(tmp_path):
    champion = tmp_path / "champion.json"
    shutil.copy(partials_ab.CHAMPION, champion)
    workloads = load_task("mla_decode").workloads
    speedup = {1: 0.93, 16: 1.005, 64: 1.03}  # batch 16 within the 1% margin: a tie, fp32
    failed = next(w.uuid for w in workloads if w.axes["batch_size"] == 64)
    results = [{"uuid": w.uuid, "status": "mismatch" if w.uuid == failed else "PASSED",
                "speedup": speedup[w.axes["batch_size"]]} for w in workloads]
    report = tmp_path / "ab.json"
    report.write_text(json.dumps({"results": results}))
    assert partials_ab.main(["choose", str(report), "--champion", str(champion)]) == 0
    chosen = load_champion(champion)  # still a valid champion file
    for keys, point in chosen.dispatch:
        mine = [w for w in workloads if all(w.axes[k] == v for k, v in keys.items())]
        expected = "fp16" if keys["batch_size"] == 64 and all(w.uuid != failed for w in mine) else "fp32"
        assert point["PARTIALS"] == expected, (keys, point)
    assert "partials_ab.py choose ab.json" in chosen.made_by
    assert partials_ab.main(["choose", str(tmp_path / "missing.json"), "--champion", str(champion)]) == 2
