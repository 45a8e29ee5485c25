"""Config composition and every bad-input error of `python -m evoteam` (one line, exit code 2)."""

import pytest
import yaml

from evoteam import cli_errors, config, resources


def test_help_lists_groups_and_options(evoteam_cli, tmp_path):
    result = evoteam_cli("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for line in ("hardware: auto, b200, cpu, h100, h200, mi350x", "task: kda_prefill, mla_decode",
                 "budget: equal, extra", "team: claude_code, codex, evolving, fixed4, single", "llm: litellm, offline",
                 "agent: claude_code, codex, command, llm",
                 "executor: auto, docker, local, ray", "tracking: mlflow, none"):
        assert line in result.stdout


def test_cfg_job_composes_target_task_and_budget(evoteam_cli, tmp_path):
    result = evoteam_cli("--cfg", "job", "hardware=mi350x", "task=kda_prefill", "budget=extra", "team.max_redesigns=0",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert cfg["team"]["max_redesigns"] == 0  # what Supervisor.from_config reads (tests/test_team_run.py)
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
        ("task.nope=1", "unknown key 'task.nope'; allowed keys here: name, workloads, scale, check_trials, timed_rounds, fib_rule, "
                        "baseline"),
        ("+task.nope=1", "unknown key 'task.nope'"),
        ("foo=bar", "unknown key 'foo'; allowed keys here: timing_mode"),
        ("executor.sandbox=none", "executor.sandbox=none is not valid; expected one of strict, weak"),
        ("hardware.name=xx", "hardware.name=xx is not a known target"),
        ("task.scale=medium", "task.scale=medium is not valid; expected one of full, small"),
        ("task.check_trials=0", "task.check_trials=0 is not valid; expected a positive integer"),
        ("task.timed_rounds=0", "task.timed_rounds=0 is not valid; expected a positive integer"),
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


# --- Newcomer defects: resume's stray folder, an unwritable run_dir, a bare workload, litellm without a model,
# --- a --help that explained no key, printed commands that ran only inside the venv.

def _finished_run(folder, evoteam_cli):
    """A finished run's folder as `resume=` reads it (its configuration, a finished state, an empty final
    table), with Hydra's record of how it started."""
    (folder / "final").mkdir(parents=True)
    (folder / ".hydra").mkdir()
    composed = evoteam_cli("--cfg", "job", "hardware=cpu", "tracking=none", cwd=folder)
    assert composed.returncode == 0, composed.stderr
    (folder / "config.yaml").write_text(composed.stdout)
    (folder / "state.json").write_text('{"finished": true}')
    (folder / "final" / "results.json").write_text("[]")
    (folder / ".hydra" / "overrides.yaml").write_text("- how it started\n")
    return folder


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_resume_makes_no_new_folder_and_keeps_the_runs_record(evoteam_cli, tmp_path):
    """resume= used to leave an empty runs/<now>/ (Hydra's folder) behind on every call."""
    run = _finished_run(tmp_path / "old", evoteam_cli)
    before = _tree(tmp_path)
    result = evoteam_cli("resume=old", "tracking=none", cwd=tmp_path)  # relative, as a user types it
    assert result.returncode == 0, result.stderr[-2000:]
    assert "old finished earlier" in result.stdout
    # Hydra's folder was the run's own: nothing new beside it or in it (no empty __main__.log either), its .hydra/
    # record as it was
    assert _tree(tmp_path) == before, _tree(tmp_path)
    assert (run / ".hydra" / "overrides.yaml").read_text() == "- how it started\n"
    # refused inside the job (after Hydra's folder is made): no folder either
    result = evoteam_cli(f"resume={run}", "task=kda_prefill", cwd=tmp_path)
    assert result.returncode == 2 and "differs from the run's" in result.stderr, result.stderr
    assert _tree(tmp_path) == before, _tree(tmp_path)
    # a multirun of resumes: its jobs' folders go (the sweep keeps its multirun.yaml)
    result = evoteam_cli("-m", f"resume={run},{_finished_run(tmp_path / 'two', evoteam_cli)}", "tracking=none",
                         f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("finished earlier") == 2
    assert _tree(tmp_path / "sweep") == ["multirun.yaml"] and not (tmp_path / "runs").exists()


def test_resume_of_a_folder_that_is_no_run_is_refused_before_anything_is_made(evoteam_cli, tmp_path):
    result = evoteam_cli("resume=nowhere/run", "tracking=none", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "resume=nowhere/run is not an evoteam run directory (no config.yaml)" in result.stderr
    assert not list(tmp_path.iterdir()), _tree(tmp_path)


@pytest.mark.parametrize("where, words", [
    ("/proc/nope", "cannot create /proc/nope"),
    ("afile/run", "afile is a file, not a folder"),
    ("afile", "is a file, not a folder"),
    ("readonly/run", "cannot create"),
])
def test_an_unwritable_run_dir_is_one_line_exit_2(evoteam_cli, tmp_path, where, words):
    """It was Hydra's traceback and exit code 1."""
    import os

    if where.startswith("readonly") and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    (tmp_path / "afile").write_text("data\n")
    (tmp_path / "readonly").mkdir(mode=0o555)
    result = evoteam_cli("hardware=cpu", "tracking=none", f"run_dir={where}", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    line = result.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in result.stderr + result.stdout, result.stderr
    assert line.startswith(f"evoteam: error: run_dir={where}: ") and words in line, line
    assert line.endswith("; give a writable folder (run_dir=<path>)"), line
    assert _tree(tmp_path) == ["afile", "readonly"] and (tmp_path / "afile").read_text() == "data\n"


def test_a_writable_run_dir_is_not_left_behind_by_the_check_and_printing_needs_none(evoteam_cli, tmp_path):
    result = evoteam_cli("--cfg", "job", "run_dir=/proc/nope", cwd=tmp_path)  # prints only: Hydra makes no folder
    assert result.returncode == 0 and "run_dir: /proc/nope" in result.stdout, result.stderr
    cli_errors.check_writable(str(tmp_path / "a" / "b"), "run_dir")  # the probe removes what it made
    assert not list(tmp_path.iterdir())
    result = evoteam_cli("-m", "team=single,fixed4", "hydra.sweep.dir=/proc/sweep", cwd=tmp_path)
    assert result.returncode == 2 and "hydra.sweep.dir=/proc/sweep: cannot create /proc/sweep" in result.stderr


def test_a_bare_workload_says_to_give_a_list(evoteam_cli, tmp_path):
    """It said 'task.workloads=00cb2bc2x is not valid; expected a string'."""
    result = evoteam_cli("hardware=cpu", "tracking=none", "task.workloads=00cb2bc2x", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert result.stderr.strip() == ("evoteam: error: task.workloads=00cb2bc2x: give a list of uuid prefixes, "
                                     "e.g. task.workloads=[00cb2bc2x]")
    assert not list(tmp_path.iterdir())
    # in a list, the prefix that matches nothing is named, beside one that does
    result = evoteam_cli("hardware=cpu", "tracking=none", "task.workloads=[00cb2bc2,zzzz]", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "task.workloads entry 'zzzz' matches no workload" in result.stderr and "(available: " in result.stderr
    assert not (tmp_path / "runs").exists()


NEEDS_MODEL = ("evoteam: error: llm=litellm needs a model: add llm.model=<provider/model>, e.g. "
               "llm.model=anthropic/claude-sonnet-4-5")


@pytest.mark.parametrize("args", [
    ("llm=litellm",),  # it silently used openai/gpt-4o-mini
    ("llm=litellm", "llm.model="),
    ("llm.provider=litellm",),
    ("-m", "llm=offline,litellm"),
])
def test_litellm_without_a_model_is_refused(evoteam_cli, tmp_path, args):
    result = evoteam_cli("hardware=cpu", "tracking=none", *args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.strip() == NEEDS_MODEL
    assert not list(tmp_path.iterdir())


def test_litellm_with_a_model_composes(evoteam_cli, tmp_path):
    result = evoteam_cli("--cfg", "job", "llm=litellm", "llm.model=anthropic/claude-sonnet-4-5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    llm = yaml.safe_load(result.stdout)["llm"]
    assert llm["provider"] == "litellm" and llm["model"] == "anthropic/claude-sonnet-4-5"


def test_help_explains_the_main_keys(evoteam_cli, tmp_path):
    result = evoteam_cli("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    keys = {line.split()[0].split("=")[0] for line in result.stdout.splitlines() if line.startswith("  ") and
            "=" in line.split()[0]}
    assert {"hardware", "task", "task.workloads", "task.scale", "budget", "budget.max_evaluations", "team", "llm",
            "llm.model", "agent", "executor", "tracking", "timing_mode", "seed", "run_dir", "resume", "remeasure",
            "repeat"} <= keys, keys
    assert "remeasure=true" in result.stdout and "measure its final kernels again" in result.stdout
    assert "CPUs always time with cputime" in result.stdout
    assert "timing_mode: graph" not in result.stdout  # the composed GPU default, shown as if every machine's
    assert not list(tmp_path.iterdir())


def test_printed_commands_run_outside_the_venv(tmp_path, capsys):
    """The resume and MLflow UI hints said `python -m ...` / `mlflow ui`, which fail where the venv is not active."""
    import shlex
    import sys

    from evoteam.team.runner import stop_cleanly
    from evoteam.tracking.store import ui_hint

    run_dir = tmp_path / "runs" / "a run"  # a space: quoted for the shell
    command = resources.python_command("-m", "evoteam", f"resume={run_dir}")
    assert shlex.split(command) == [sys.executable, "-m", "evoteam", f"resume={run_dir}"]
    stop_cleanly(run_dir)
    printed = capsys.readouterr().err
    assert f"Continue with: {command}" in printed and command.startswith(shlex.quote(sys.executable))
    hint = ui_hint("sqlite:////data/evoteam mlflow.db", "1", "abc")
    shown, page = hint.split(", then ")
    assert shlex.split(shown) == [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri",
                                  "sqlite:////data/evoteam mlflow.db", "--port", "5000"]
    assert page.startswith("http://127.0.0.1:5000/#/experiments/1/runs/abc")


def test_an_llm_failure_says_how_to_resume_with_this_interpreter(tmp_path):
    import sys

    from evoteam import mainjob
    from evoteam.errors import UserError
    from evoteam.llm import LLMError

    class TeamRun:
        def run(self):
            raise LLMError("the provider is down")

        def checkpoint(self):
            pass

    class Tracker:
        def sync(self, team_run):
            pass

        def stop(self, status):
            self.status = status

    tracker = Tracker()
    with pytest.raises(UserError) as caught:
        mainjob._search(TeamRun(), tracker, tmp_path / "run")
    assert tracker.status == "FAILED"
    assert str(caught.value).endswith(f"then {resources.python_command('-m', 'evoteam', f'resume={tmp_path}/run')}")
    assert sys.executable in str(caught.value)


def test_the_main_job_takes_fib_rule(evoteam_cli, tmp_path):
    """`task.fib_rule=true` composes, and the main job's every evaluation request then judges by flashinfer-bench's rule
    (HarnessSettings.from_config: the template of the team's and the final table's requests)."""
    from omegaconf import OmegaConf

    from evoteam.target import Target
    from evoteam.team.toolbox import HarnessSettings

    result = evoteam_cli("--cfg", "job", "hardware=cpu", "task.fib_rule=true", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["task"]["fib_rule"] is True
    target = Target.resolve("mla_decode", "cpu", scale="small", executor=None)
    for fib in (False, True):
        cfg = OmegaConf.structured(config.EvoteamConfig(task=config.TaskConfig(name="mla_decode", fib_rule=fib)))
        settings = HarnessSettings.from_config(cfg, target)
        assert settings.template.fib_rule is fib and settings.final_request("k.py", []).fib_rule is fib


def test_the_main_job_takes_timed_rounds(evoteam_cli, tmp_path):
    """`task.timed_rounds=N` reaches every evaluation request of the main job (the search's and the final table's,
    which takes at least 3); unset, the target's rounds (a CPU's 15, a GPU's search 20)."""
    from omegaconf import OmegaConf

    from evoteam.harness.model import CPU_ROUNDS
    from evoteam.target import Target
    from evoteam.team.toolbox import GPU_ROUNDS, HarnessSettings

    result = evoteam_cli("--cfg", "job", "hardware=cpu", "task.timed_rounds=4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["task"]["timed_rounds"] == 4
    for hardware, default in (("cpu", CPU_ROUNDS[1]), ("h100", GPU_ROUNDS[1])):
        target = Target.resolve("mla_decode", hardware, scale="small", executor=None)
        for rounds, reps, final in ((None, default, default), (4, 4, 4), (2, 2, 3)):
            cfg = OmegaConf.structured(config.EvoteamConfig(task=config.TaskConfig(name="mla_decode",
                                                                                   timed_rounds=rounds)))
            settings = HarnessSettings.from_config(cfg, target)
            assert (settings.template.reps, settings.final_request("k.py", []).reps) == (reps, final), hardware


def _read_only(folder):
    """A command prefix under which `folder` is read-only: a read-only bind mount in a mount namespace of its own as
    root (who writes through file modes), else the folder's mode."""
    import os
    import subprocess

    if os.geteuid() != 0:
        folder.chmod(0o555)
        return []
    if subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespace here (unshare -m) for a read-only mount")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"', "sh"]


@pytest.mark.parametrize("existing", [False, True])
def test_an_unwritable_mlflow_store_is_one_line_at_once(tmp_path, existing):
    """Issue 54: a sqlite store on a read-only mount took 106 s of MLflow's retries and 39 warning lines (no database
    there yet), or a SQLAlchemy error over several lines (one there), before the run's one-line error."""
    import os
    import sqlite3
    import subprocess
    import sys
    import time

    store = tmp_path / "ro"
    store.mkdir()
    if existing:
        sqlite3.connect(store / "evoteam.db").close()
    uri = f"sqlite:///{store}/evoteam.db"
    started = time.monotonic()
    result = subprocess.run([*_read_only(store), sys.executable, "-m", "evoteam", "hardware=cpu", "team=single",
                             "task.workloads=[00cb2bc2]", "budget.max_evaluations=1", f"tracking.tracking_uri={uri}"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    why = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
    assert result.stderr == (f"evoteam: error: tracking.tracking_uri={uri}: cannot write {store} ({why}); give a store "
                             f"in a writable folder (tracking.tracking_uri=sqlite:///<path>.db) or use tracking=none\n")
    assert result.stdout == "" and took < 30, (took, result.stdout[-2000:])  # before the job started
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]  # no run folder


def test_a_store_beside_a_file_is_refused_in_the_job_too(tmp_path):
    """The job's own check (a resumed run logs to the store it started in, which the command line does not name)."""
    from evoteam.errors import UserError
    from evoteam.tracking import Tracker

    (tmp_path / "afile").write_text("data\n")
    uri = f"sqlite:///{tmp_path}/afile/evoteam.db"
    with pytest.raises(UserError, match=r"afile: it is a file, not a folder; give a store in a writable folder"):
        Tracker(uri, "evoteam", tmp_path / "run").start()
