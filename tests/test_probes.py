"""scripts/probes.py: the options the GPU probes share."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import probes  # noqa: E402


def test_parser_has_the_shared_options_and_takes_the_callers():
    p = probes.parser("probe", ["aaaa"], reps=7)
    p.add_argument("kernel", nargs="?", default="k.py")
    defaults = p.parse_args([])
    assert (defaults.points, defaults.workloads, defaults.reps, defaults.json, defaults.deadline) == \
        ("[{}]", ["aaaa"], 7, None, 0)
    args = p.parse_args(["x.py", "--points", '[{"BV": 16}]', "--workloads", "b", "c", "--json", "o.json",
                         "--deadline", "30", "--reps", "3"])
    assert (args.kernel, args.points, args.workloads, args.json, args.deadline, args.reps) == \
        ("x.py", '[{"BV": 16}]', ["b", "c"], Path("o.json"), 30.0, 3)


def test_the_probes_champion_runs_each_shapes_fastest_point_and_never_an_ablation():
    import kda_probe

    from evoteam.families import Champion
    from evoteam.task import load_task

    task = load_task("kda_prefill")
    kernel = Path(task.folder) / "chunk_triton.py"
    fast = {"BT": 32, "intra_warps": 4}
    points = {"{}": {}, '{"BT":32,"intra_warps":4}': fast}

    def row(uuid, heads, seqs, tokens, name, us):
        return {"workload": uuid, "axes": {"num_v_heads": heads, "num_sequences": seqs, "seq_len": tokens},
                "kernel": name, "graph_us": us}

    rows = [row("aaaa", 32, 1, 16384, "{}", 1900.0), row("aaaa", 32, 1, 16384, '{"BT":32,"intra_warps":4}', 1700.0),
            row("aaaa", 32, 1, 16384, "{} ablate=12", 100.0),  # an ablation is faster, and wrong: never chosen
            row("bbbb", 8, 1, 16384, "{}", 800.0), row("bbbb", 8, 1, 16384, '{"BT":32,"intra_warps":4}', 990.0),
            # two workloads of one shape (the two gate forms): one entry, by the geomean over both
            row("cccc", 16, 1, 8192, "{}", 600.0), row("cccc", 16, 1, 8192, '{"BT":32,"intra_warps":4}', 590.0),
            row("dddd", 16, 1, 8192, "{}", 500.0), row("dddd", 16, 1, 8192, '{"BT":32,"intra_warps":4}', 560.0)]
    champion = kda_probe.fastest_point_champion(kernel, task, "h200", rows, points)
    assert isinstance(champion, Champion) and champion.params == {}
    assert champion.dispatch == [[{"num_v_heads": 8, "num_sequences": 1, "seq_len": 16384}, {}],
                                 [{"num_v_heads": 16, "num_sequences": 1, "seq_len": 8192}, {}],
                                 [{"num_v_heads": 32, "num_sequences": 1, "seq_len": 16384}, fast]]
    assert "on 4 workloads; 1.028x" in champion.made_by  # geomean of 1900/1700, 800/800, 1, 1
    by_uuid = {w.uuid[:8]: w for w in task.scaled_workloads("full")}
    chosen = champion.points_by_workload([by_uuid["1476db7b"], by_uuid["b9321a1b"]])  # 16k x 32 and 16k x 8
    assert chosen[by_uuid["1476db7b"].uuid]["BT"] == 32 and chosen[by_uuid["b9321a1b"].uuid]["BT"] == 64


def test_keep_from_fills_the_shapes_the_probe_gave_no_entry(tmp_path):
    """--keep-from: a probe of the single sequences only keeps the committed champion's batch entries; a probed
    shape's new choice replaces the old one; a champion of another family is refused in one line."""
    import kda_probe
    import pytest

    from evoteam.task import load_task

    task = load_task("kda_prefill")
    kernel = Path(task.folder) / "chunk_triton.py"
    committed = Path(task.folder) / "champion_h200.json"
    base = json.loads(committed.read_text())["dispatch"]
    seg = {"BT": 32, "merge": "launch", "segments": 8}
    rows = [{"workload": "aaaa", "axes": {"num_v_heads": 32, "num_sequences": 1, "seq_len": 16384}, "kernel": name,
             "graph_us": us} for name, us in (("{}", 1900.0), ("seg", 1200.0))]
    champion = kda_probe.fastest_point_champion(kernel, task, "h200", rows, {"{}": {}, "seg": seg}, committed)
    shapes = [tuple(axes[a] for a in kda_probe.SHAPE_AXES) for axes, _ in champion.dispatch]
    assert shapes == sorted(shapes) and len(shapes) == len(base)  # the one probed shape is already in the base
    entries = {tuple(axes[a] for a in kda_probe.SHAPE_AXES): point for axes, point in champion.dispatch}
    assert entries[(32, 1, 16384)] == seg
    assert entries[(32, 8, 16384)] == {"BT": 32, "intra_warps": 2, "intra_maxnreg_bounded": None}  # kept
    assert "19 other shapes' entries kept from champion_h200.json" in champion.made_by
    other = tmp_path / "mla.json"
    other.write_text((Path(load_task("mla_decode").folder) / "champion_h200.json").read_text())
    with pytest.raises(SystemExit, match="--keep-from"):
        kda_probe.fastest_point_champion(kernel, task, "h200", rows, {"{}": {}, "seg": seg}, other)
