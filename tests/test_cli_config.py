"""Config composition and every bad-input error of `python -m evoteam` (one line, exit code 2)."""

import pytest
import yaml

from evoteam import cli_errors, config


def test_help_lists_groups_and_options(evoteam_cli, tmp_path):
    result = evoteam_cli("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for line in ("hardware: auto, b200, cpu, h100, h200, mi350x", "task: kda_prefill, mla_decode",
                 "budget: equal, extra", "team: claude_code, codex, evolving, fixed4, single", "llm: litellm, offline",
                 "agent: claude_code, codex, command, llm",
                 "executor: docker, local", "tracking: mlflow, none"):
        assert line in result.stdout


def test_cfg_job_composes_target_task_and_budget(evoteam_cli, tmp_path):
    result = evoteam_cli("--cfg", "job", "hardware=mi350x", "task=kda_prefill", "budget=extra", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert cfg["hardware"]["name"] == "mi350x"
    assert cfg["task"]["name"] == "kda_prefill"
    assert cfg["budget"]["mode"] == "extra"
    assert cfg["team"]["preset"] == "evolving" and cfg["llm"]["provider"] == "offline"
    # GPUs time device work by default (graph); every mode composes, and the sandbox is strict unless asked
    assert cfg["timing_mode"] == "graph" and cfg["executor"]["sandbox"] == "strict"
    assert not list(tmp_path.iterdir()), "printing the config must not create run folders"
    for mode in ("graph", "events", "wallclock"):
        other = evoteam_cli("--cfg", "job", f"timing_mode={mode}", "executor.sandbox=weak", cwd=tmp_path)
        assert other.returncode == 0, other.stderr
        assert yaml.safe_load(other.stdout)["timing_mode"] == mode


@pytest.mark.parametrize(
    "override, expected",
    [
        ("hardware=foo", "hardware=foo is not a known option; allowed: auto, b200, cpu, h100, h200, mi350x"),
        ("task=nope", "task=nope is not a known option; allowed: kda_prefill, mla_decode"),
        ("budget=bogus", "budget=bogus is not a known option; allowed: equal, extra"),
        ("team.preset=bogus", "team.preset=bogus is not valid; expected one of single, fixed4, evolving"),
        ("budget.tokens=abc", "budget.tokens=abc is not valid; expected an integer"),
        ("llm.temperature=hot", "llm.temperature=hot is not valid; expected a number"),
        ("task.nope=1", "unknown key 'task.nope'; allowed keys here: name, workloads, scale, check_trials, baseline"),
        ("+task.nope=1", "unknown key 'task.nope'"),
        ("foo=bar", "unknown key 'foo'; allowed keys here: timing_mode"),
        ("executor.sandbox=none", "executor.sandbox=none is not valid; expected one of strict, weak"),
        ("hardware.name=xx", "hardware.name=xx is not a known target"),
        ("task.scale=medium", "task.scale=medium is not valid; expected one of full, small"),
        ("task.check_trials=0", "task.check_trials=0 is not valid; expected a positive integer"),
        ("timing_mode=fast", "timing_mode=fast is not valid; expected one of graph, events, wallclock, cputime"),
        ("hardware=[h100", "cannot parse the override"),
    ],
)
def test_bad_input_is_one_line_exit_2(evoteam_cli, tmp_path, override, expected):
    result = evoteam_cli(override, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("evoteam: error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_every_value_of_a_sweep_is_checked(evoteam_cli, tmp_path):
    result = evoteam_cli("-m", "team=single,fixed4", "budget=equal,bogus", cwd=tmp_path)
    assert result.returncode == 2
    assert "budget=bogus is not a known option" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_hardware_mismatch_is_one_line(evoteam_cli, tmp_path):
    result = evoteam_cli("hardware=h200", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "hardware=h200 does not match this machine" in result.stderr
    assert "executor=docker" in result.stderr


def test_preflight_accepts_good_sweeps_and_hydra_keys():
    config.register()
    cli_errors.preflight(["budget=equal,extra", "team=single,fixed4,evolving", "task=kda_prefill"])
    cli_errors.preflight(["hardware=cpu", "task.workloads=[abc]", "seed=3"])


def test_unknown_workload_prefix_is_one_line(evoteam_cli, tmp_path):
    result = evoteam_cli("hardware=cpu", "task.workloads=[zzzz]", "tracking=none", cwd=tmp_path)
    assert result.returncode == 2
    assert "task.workloads entry 'zzzz' matches no workload" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, expected", [
    (("repeat=3",), "repeat=3 runs each configuration 3 times as a sweep: add -m"),
    (("-m", "repeat=zero"), "repeat=zero: give a whole number of runs per configuration"),
    (("-m", "repeat=2", "seed=5"), "give repeat=N or seed=..., not both"),
])
def test_repeat_is_one_line_where_it_cannot_run(evoteam_cli, tmp_path, args, expected):
    result = evoteam_cli(*args, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert expected in result.stderr


def test_repeat_is_a_sweep_over_seeds_in_the_place_of_the_override():
    """repeat=N is the sweep dimension seed=range(1,N+1), which every Hydra launcher (basic, Ray) expands."""
    from evoteam.__main__ import _repeats

    assert _repeats(["-m", "team=single,evolving", "repeat=3", "hardware=cpu"]) == \
        ["-m", "team=single,evolving", "seed=range(1,4)", "hardware=cpu"]
    assert _repeats(["-m", "repeat=1", "team=single"]) == ["-m", "team=single"]
    assert _repeats(["team=single"]) == ["team=single"]
