"""python -m evoteam.sweep without a GPU: points of a space, the DISPATCH rewrite, the per-workload
choice with smoothing, merging shards, emitting a champion and building its candidate."""

import json

import pytest

from evoteam import sweep as SW
from evoteam.errors import UserError
from evoteam.families import load_champion, load_families, read_params, set_literal

from conftest import run_module


def family():
    return next(f for f in load_families("mla_decode") if f.name == "flashdecode")


def test_points_and_sources():
    fam = family()
    assert len(SW.family_points(fam, None, None)) == fam.size
    points = SW.family_points(fam, '{"num_warps": [4], "COMBINE": ["last"]}', None)
    fixed = len(fam.space["num_warps"]) * len(fam.space["COMBINE"])
    assert len(points) == fam.size // fixed and all(p["num_warps"] == 4 and p["COMBINE"] == "last" for p in points)
    off_space = SW.family_points(fam, '{"BLOCK_N": [64]}', None)  # off the listed space: still written
    source = SW.point_source(fam, off_space[0])
    assert read_params(source)["BLOCK_N"] == 64
    assert SW.family_points(fam, None, '[{"num_warps": 8}]') == [{**fam.default, "num_warps": 8}]
    with pytest.raises(UserError, match="does not have"):
        SW.family_points(fam, '{"BLOCK_M": [1]}', None)


def test_set_literal_round_trip():
    source = 'A = 1\nDISPATCH = []  # tail\nB = "DISPATCH = []"\n'
    table = [[{"batch_size": 1, "num_kv_indices": 8}, {"COMBINE": "last", "FAST_LAUNCH": True, "x": None}]]
    out = set_literal(source, "DISPATCH", table)
    namespace = {}
    exec(compile(out, "<t>", "exec"), namespace)  # noqa: S102 - our own generated text
    assert namespace["DISPATCH"] == table and namespace["B"] == "DISPATCH = []"
    assert out.splitlines()[1] == "DISPATCH = [" and out.rstrip().endswith('B = "DISPATCH = []"')
    assert set_literal(out, "DISPATCH", []) == 'A = 1\nDISPATCH = []  # tail\nB = "DISPATCH = []"\n'
    with pytest.raises(ValueError, match="no module-level assignment"):
        set_literal("X = 1\n", "DISPATCH", [])


def fake_sweep(speedups):
    """speedups: {uuid: (batch, tokens, [speedup per point, None = failed])}"""
    n_points = len(next(iter(speedups.values()))[2])
    sweep = {"task": "mla_decode", "family": "flashdecode", "hardware": "h200", "baseline": "flashinfer",
             "baseline_options": {}, "timing": "events",
             "workloads": {u: {"label": f"b{b} n{n}", "axes": {"batch_size": b, "num_kv_indices": n}}
                           for u, (b, n, _) in speedups.items()},
             "points": []}
    for i in range(n_points):
        results = {u: ({"status": "PASSED", "speedup": s[i]} if s[i] else {"status": "mismatch", "speedup": None})
                   for u, (_, _, s) in speedups.items()}
        sweep["points"].append({"params": {**family().default, "num_warps": [4, 8, 4][i],
                                           "COMBINE": ["last", "last", "launch"][i]}, "results": results})
    return sweep


def test_choice_smoothing_and_emission(tmp_path, capsys):
    speedups = {"a": (1, 8, [1.0, 2.0, 1.5]), "b": (1, 100, [1.0, 1.9, 2.4]), "c": (1, 1000, [1.0, 2.0, 1.5]),
                "d": (64, 9000, [2.0, None, 1.0])}
    sweep = fake_sweep(speedups)
    axes = ["batch_size", "num_kv_indices"]
    assert SW.choose(sweep, axes, 0) == {"a": 1, "b": 2, "c": 1, "d": 0}
    assert SW.choose(sweep, axes, 1) == {"a": 1, "b": 1, "c": 1, "d": 0}  # b's 3.0 alone is outvoted
    shard1, shard2 = dict(sweep, points=sweep["points"][:2]), dict(sweep, points=sweep["points"][2:])
    (tmp_path / "s1.json").write_text(json.dumps(shard1))
    (tmp_path / "s2.json").write_text(json.dumps(shard2))
    merged = SW.merge_sweeps([tmp_path / "s1.json", tmp_path / "s2.json"])
    assert merged["points"] == sweep["points"]
    kernel = tmp_path / "champion.py"
    SW.main(["--task", "mla_decode", "--family", "flashdecode", "--merge", str(tmp_path / "s1.json"),
             str(tmp_path / "s2.json"), "--dispatch-axes", "batch_size,num_kv_indices", "--smooth", "0",
             "--emit-champion", str(tmp_path / "d.json"), "--emit-kernel", str(kernel)])
    printed = capsys.readouterr().out
    # points 0 and 2 pass everywhere; 2 has the higher geomean
    assert 'best single point: geomean 1.524x, worst 1.000x: {' in printed and '"COMBINE": "launch"' in printed
    champion = load_champion(tmp_path / "d.json")
    table = champion.dispatch
    assert [entry[0]["num_kv_indices"] for entry in table] == [8, 100, 1000, 9000]
    assert table[1][1]["COMBINE"] == "launch" and table[3][1]["num_warps"] == 4
    namespace = {}
    exec(compile(kernel.read_text(), str(kernel), "exec"), namespace)  # noqa: S102
    assert namespace["DISPATCH"] == table and namespace["PARAMS"] == sweep["points"][2]["params"]
    assert namespace["params_for"](1, 105)["COMBINE"] == "launch"  # nearest: batch 1, 100 tokens
    # --build makes the same candidate from the champion file alone
    built = tmp_path / "built.py"
    assert SW.main(["--build", str(tmp_path / "d.json"), "--emit-kernel", str(built)]) == 0
    assert built.read_text() == kernel.read_text()



def test_merge_refuses_mixed_timing_unless_later_files_override(tmp_path, capsys):
    """A graph-timed sweep of every workload, then batch 1 re-swept with events: plain merging would
    compare speedups of two timing modes; --override takes batch 1 from the events sweep alone."""
    graph = fake_sweep({"a": (1, 8, [1.4, 1.2, 1.3]), "b": (1, 100, [1.1, 1.2, 1.0]), "d": (64, 9000, [0.9, 0.8, 1.0])})
    graph["timing"] = "graph"
    events = fake_sweep({"a": (1, 8, [0.8, 0.7, 1.2]), "b": (1, 100, [0.9, 0.8, 1.1])})
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    (tmp_path / "events.json").write_text(json.dumps(events))
    with pytest.raises(UserError, match="timing events.*--override"):
        SW.merge_sweeps([tmp_path / "graph.json", tmp_path / "events.json"])
    merged = SW.merge_sweeps([tmp_path / "graph.json", tmp_path / "events.json"], override=True)
    assert merged["timing"] == "graph+events" and len(merged["points"]) == 6
    chosen = SW.choose(merged, ["batch_size", "num_kv_indices"], 0)
    assert chosen == {"a": 5, "b": 5, "d": 2}  # batch 1 from the events points (3..5), d from the graph ones
    SW.main(["--task", "mla_decode", "--family", "flashdecode", "--merge", str(tmp_path / "graph.json"),
             str(tmp_path / "events.json"), "--override", "--dispatch-axes", "batch_size,num_kv_indices",
             "--smooth", "0", "--emit-champion", str(tmp_path / "d.json")])
    table = json.loads((tmp_path / "d.json").read_text())["dispatch"]
    assert [entry[1]["COMBINE"] for entry in table] == ["launch", "launch", "launch"]
    assert "none passed every workload" in capsys.readouterr().out



def test_bad_input_is_one_line(tmp_path):
    def sweep(*args):
        return run_module(list(args), module="evoteam.sweep", timeout=120)

    for args, message in [(["--task", "nope", "--family", "x"], "not a known task"),
                          (["--task", "mla_decode", "--family", "nope"], "has no family"),
                          (["--task", "mla_decode", "--family", "flashdecode", "--merge", str(tmp_path / "a.json")],
                           "not a readable sweep JSON"),
                          (["--build", str(tmp_path / "a.json"), "--emit-kernel", str(tmp_path / "k.py")],
                           "not a readable champion file")]:
        proc = sweep(*args)
        assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_a_champion_off_its_family_space_is_refused(tmp_path):
    committed = json.loads((family().path.parent / "champion_h200.json").read_text())
    committed["dispatch"][0][1] = {**committed["dispatch"][0][1], "BLOCK_N": 12345}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(committed))
    with pytest.raises(ValueError, match=r"dispatch\[0\] is not"):
        load_champion(path)
