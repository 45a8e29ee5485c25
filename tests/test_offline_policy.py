"""The offline policy's choices with an inherited champion: it tunes per workload group, from the point the
champion's dispatch runs on the weakest group's weakest workload, never re-evaluates a point the champion already
ran there, and its explorer tries the other families' designs on that group."""

import random
from types import SimpleNamespace

from evoteam.families import load_families
from evoteam.team.offline import OfflineAgent, Point, SearchSpace
from evoteam.team.spec import RoleSpec
from evoteam.team.workspace import Attempt

GROUPS = {"batch1": ["a1", "a2"], "batch64": ["b1", "b2", "b3"]}


class RecordingToolbox:
    """The part of Toolbox the offline agent uses: the workspace's attempts, and evaluate(), recorded."""

    def __init__(self, attempts):
        self.workspace = SimpleNamespace(attempts=attempts)
        self.settings = SimpleNamespace(all_workloads=[u for us in GROUPS.values() for u in us])
        self.asked = []

    def evaluate(self, source, origin, kind, workloads):
        self.asked.append((origin, workloads))
        return Attempt("9", "k", "t", "r", "check", origin, list(workloads or []), "PASSED", "")


def _point(family, params):
    return Point(family, tuple(sorted(params.items())))


def test_the_tuner_starts_from_the_inherited_dispatch_on_the_weakest_group():
    space = SearchSpace(load_families("mla_decode"))
    default = space.default("flashdecode").as_dict
    on_a = {**default, "BLOCK_N": 16}
    on_b_weak = {**default, "BLOCK_N": 32, "PROGRAMS_PER_SM": 2}
    on_b = {**default, "BLOCK_N": 32}
    champion = Attempt("1", "k0", "inherited", "inherited:inherited", "benchmark",
                       {"inherited": "champion_h200.json", "family": "flashdecode", "params": default,
                        "points": {"a1": on_a, "a2": on_a, "b1": on_b, "b2": on_b_weak, "b3": on_b}},
                       ["a1", "a2", "b1", "b2", "b3"], "PASSED", "",
                       speedups={"a1": 1.3, "a2": 1.25, "b1": 1.0, "b2": 0.85, "b3": 1.05}, geomean=1.08)
    for kind in ("tuner", "explorer"):
        box = RecordingToolbox([champion])
        agent = OfflineAgent(RoleSpec(kind, kind), space, random.Random(0), GROUPS)
        getattr(agent, "tune" if kind == "tuner" else "explore")(box)
        (origin, workloads), = box.asked
        assert workloads == GROUPS["batch64"]  # the weakest group (geomean 0.96x against 1.27x), all its workloads
        asked = _point(origin["family"], origin["params"])
        if kind == "tuner":
            # a neighbour of the point the champion runs on b2 (0.85x, the weakest), not of the family's default
            assert asked in space.neighbours(_point("flashdecode", on_b_weak))
            assert asked not in {_point("flashdecode", p) for p in (on_b, on_b_weak)}
        else:
            assert origin["family"] != "flashdecode"  # the families' other designs first
    # a role of its own group keeps to it; a point the champion ran there is tried, so the tuner moves on
    box = RecordingToolbox([champion])
    agent = OfflineAgent(RoleSpec("t", "tuner", workload_group="batch1"), space, random.Random(0), GROUPS)
    agent.tune(box)
    (origin, workloads), = box.asked
    assert workloads == GROUPS["batch1"]
    assert _point(origin["family"], origin["params"]) in space.neighbours(_point("flashdecode", on_a))


def test_without_groups_or_measurements_the_probe_set_is_used():
    space = SearchSpace(load_families("mla_decode"))
    box = RecordingToolbox([])
    OfflineAgent(RoleSpec("t", "tuner"), space, random.Random(0), GROUPS).tune(box)
    (origin, workloads), = box.asked
    assert workloads is None  # nothing measured yet: the probe set


def test_a_family_far_behind_everywhere_it_ran_is_explored_last():
    """After the seed family ran at 0.07x on one group next to the inherited champion, the explorer's next group
    gets another family's design first, not the seed's again (the seed comes first by name otherwise); the naive
    seed comes last next to an inherited champion even before it is measured."""
    space = SearchSpace(load_families("mla_decode"))
    default = space.default("flashdecode").as_dict
    champion = Attempt("1", "k0", "inherited", "inherited:inherited", "benchmark",
                       {"inherited": "champion_h200.json", "family": "flashdecode", "params": default,
                        "points": {u: default for us in GROUPS.values() for u in us}},
                       [u for us in GROUPS.values() for u in us], "PASSED", "",
                       speedups={"a1": 1.1, "a2": 1.0, "b1": 1.0, "b2": 0.9, "b3": 0.95}, geomean=0.99)
    seed = Attempt("2", "k1", "t", "explorer", "benchmark",
                   {"family": "seed", "params": space.default("seed").as_dict}, GROUPS["batch64"], "PASSED", "",
                   speedups={"b1": 0.07, "b2": 0.06, "b3": 0.08}, geomean=0.07)
    box = RecordingToolbox([champion, seed])
    OfflineAgent(RoleSpec("e", "explorer", workload_group="batch1"), space, random.Random(0), GROUPS).explore(box)
    (origin, workloads), = box.asked
    assert workloads == GROUPS["batch1"] and origin["family"] == "splitkv"
    # the seed is the task's naive kernel (families.json): next to an inherited champion it comes last even
    # before it was measured; next to a kernel a team wrote, it would come first on batch1 (by name)
    box = RecordingToolbox([champion])
    OfflineAgent(RoleSpec("e", "explorer", workload_group="batch1"), space, random.Random(0), GROUPS).explore(box)
    (origin, _), = box.asked
    assert space.families["seed"].naive and origin["family"] == "splitkv"
    from dataclasses import replace

    box = RecordingToolbox([replace(champion, team="t")])
    OfflineAgent(RoleSpec("e", "explorer", workload_group="batch1"), space, random.Random(0), GROUPS).explore(box)
    (origin, _), = box.asked
    assert origin["family"] == "seed"


def test_the_tuner_moves_each_workloads_own_point_in_one_table_from_the_inherited_dispatch():
    """With a point per workload inherited and workload shapes known, one evaluation tries a neighbour of every
    focus workload's own point (a DISPATCH table), not one point on the whole group."""
    from evoteam.task import load_task

    task = load_task("mla_decode")
    ws = task.workloads[:5]
    groups = {"g1": [w.uuid for w in ws[:2]], "g2": [w.uuid for w in ws[2:]]}
    space = SearchSpace(load_families("mla_decode"))
    default = space.default("flashdecode").as_dict
    own = [{**default, "BLOCK_N": 16}, {**default, "BLOCK_N": 32}, {**default, "PROGRAMS_PER_SM": 2},
           {**default, "BLOCK_N": 32, "PROGRAMS_PER_SM": 2}, {**default, "BLOCK_N": 16, "num_warps": 8}]
    points = {w.uuid: p for w, p in zip(ws, own)}
    champion = Attempt("1", "k0", "inherited", "inherited:inherited", "benchmark",
                       {"inherited": "champion_h200.json", "family": "flashdecode", "params": default,
                        "points": points}, [w.uuid for w in ws], "PASSED", "",
                       speedups=dict(zip(groups["g1"] + groups["g2"], (1.3, 1.2, 0.9, 0.8, 1.0))), geomean=1.0,
                       noises={w.uuid: 0.01 for w in ws})
    # a team's kernel of another family beat the champion on ws[4] beyond noise: that workload sits out
    other = Attempt("2", "k1", "t", "explorer", "benchmark", {"family": "splitkv",
                    "params": space.default("splitkv").as_dict}, [ws[4].uuid], "PASSED", "",
                    speedups={ws[4].uuid: 1.5}, noises={ws[4].uuid: 0.01}, geomean=1.5)
    box = RecordingToolbox([champion, other])
    agent = OfflineAgent(RoleSpec("t", "tuner"), space, random.Random(0), groups, {w.uuid: w for w in ws})
    agent.tune(box)
    (origin, workloads), = box.asked
    assert workloads == [ws[2].uuid, ws[3].uuid]  # the weakest group, less the workload kept on splitkv
    assert origin["family"] == "flashdecode" and set(origin["points"]) == set(workloads)
    for u in workloads:  # what the table runs there (the kernel's own rule) is a neighbour of that workload's point
        assert _point("flashdecode", origin["points"][u]) in space.neighbours(_point("flashdecode", points[u]))
    # the next turn, that attempt measured, moves each workload to a neighbour not yet tried there
    first = Attempt("3", "k2", "t", "tuner", "benchmark", origin, workloads, "PASSED", "",
                    speedups={u: 0.5 for u in workloads}, geomean=0.5)
    box = RecordingToolbox([champion, other, first])
    agent.tune(box)
    (again, _), = box.asked
    for u in workloads:
        assert again["points"][u] != origin["points"][u]
        assert _point("flashdecode", again["points"][u]) in space.neighbours(_point("flashdecode", points[u]))
    # without the workloads' shapes the tuner keeps to one point on the group
    box = RecordingToolbox([champion, other])
    OfflineAgent(RoleSpec("t", "tuner"), space, random.Random(0), groups).tune(box)
    (single, _), = box.asked
    assert "points" not in single


def test_families_the_target_interprets_are_explored_after_the_native_ones():
    """On a CPU, Triton runs under its interpreter (about 0.01x, however good the kernel is on a GPU): a team there
    explores the families that run natively first, so its speedups are real numbers."""
    from evoteam import hardware

    families = load_families("mla_decode")
    cpu, h200 = hardware.load_spec("cpu"), hardware.load_spec("h200")
    assert cpu.interprets_triton and not h200.interprets_triton
    interpreted = frozenset(f.name for f in families if f.uses_triton)
    assert {"seed", "splitkv", "flashdecode"} <= interpreted and "torch_cpu" not in interpreted
    for tried in ([], ["torch_cpu"]):  # nothing tried yet, and the native family's default already tried
        space = SearchSpace(families, interpreted)
        attempts = [Attempt(str(i), f"k{i}", "t", "explorer", "benchmark",
                            {"family": f, "params": space.default(f).as_dict}, ["a1"], "PASSED", "",
                            speedups={"a1": 1.5}, geomean=1.5) for i, f in enumerate(tried)]
        box = RecordingToolbox(attempts)
        OfflineAgent(RoleSpec("e", "explorer"), space, random.Random(0), GROUPS).explore(box)
        (origin, _), = box.asked
        assert origin["family"] == "torch_cpu"
    box = RecordingToolbox([])
    OfflineAgent(RoleSpec("e", "explorer"), SearchSpace(families), random.Random(0), GROUPS).explore(box)
    assert box.asked[0][0]["family"] == "flashdecode"  # on a GPU: by name among the untried
