"""The main job, `python -m evoteam`: a supervisor runs a team of agents (LLM or the offline
policy) that search for faster kernels of the task on the hardware target, within a budget;
the best verified kernels are re-measured against the baseline at the end (where a team measured one).

Everything lands in the run directory: `config.yaml`, `state.json` (checkpoint), `run.log`, `workspace/`
(attempts, team specs; the strategy ledger and notes where members write them), `final/` (dispatch table,
kernels, per-workload results, FlashInfer-Trace lines), `mlflow_run.json`, and with an LLM `brief.md` and
`llm_journal.jsonl` (README.md's table, which tests/test_mainjob.py holds to what a run writes).
`resume=<run dir>` continues a run.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from evoteam import report, tracking
from evoteam.errors import UserError
from evoteam.schema import append_traces
from evoteam.target import Target

# Keys a resumed run may take from the command line: where and how it is tracked and run, never what it measures.
SAFE_ON_RESUME = ("tracking", "executor.timeout_s", "executor.docker_host", "executor.cache_dir", "executor.ray.address",
                  "executor.ray.auth_token_env", "executor.ray.wait_s", "llm.api_key_env",
                  "llm.api_base", "llm.timeout_s", "llm.max_retries", "remeasure", "resume")


def _command_line_keys() -> dict[str, str]:
    """The keys the command line set (Hydra's overrides of this job), each with its value as typed."""
    try:
        from hydra.core.hydra_config import HydraConfig

        lines = list(HydraConfig.get().overrides.task)
    except Exception:  # outside Hydra (tests)
        return {}
    return {line.split("=", 1)[0].lstrip("+~"): line.split("=", 1)[1] for line in lines if "=" in line}


def _differences(key: str, new, old, shown: int = 2) -> str:
    """The run's values where `new` differs from them: the key itself, or for a group (task=..., a whole section)
    its first differing keys, never both sections whole."""
    if not (OmegaConf.is_dict(new) and OmegaConf.is_dict(old)):
        return f"{key}={OmegaConf.to_container(old) if OmegaConf.is_config(old) else old}"
    flat_new, flat_old = (tracking.flatten(OmegaConf.to_container(c, resolve=True, enum_to_str=True), f"{key}.")
                          for c in (new, old))
    differ = [k for k in flat_old if flat_new.get(k) != flat_old[k]] + [k for k in flat_new if k not in flat_old]
    parts = [f"{k}={flat_old.get(k, '(unset)')}" for k in differ[:shown]]
    return ", ".join(parts) + (f" and {len(differ) - shown} more" if len(differ) > shown else "")


def _resumed(cfg: DictConfig) -> tuple[Path, DictConfig]:
    """The run directory and configuration of `resume=<dir>`: the saved configuration, with the command
    line's safe overrides applied and any other that changes it refused (one line)."""
    run_dir = Path(cfg.resume)
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise UserError(f"resume={cfg.resume} is not an evoteam run directory (no config.yaml); "
                        f"give the folder of an earlier run")
    merged = OmegaConf.merge(cfg, OmegaConf.load(saved))  # typed by the schema, values of the run
    for key, typed in _command_line_keys().items():
        new, old = OmegaConf.select(cfg, key), OmegaConf.select(merged, key)
        if key == "resume" or new == old:
            continue
        if not (key in SAFE_ON_RESUME or key.startswith(tuple(k + "." for k in SAFE_ON_RESUME))):
            raise UserError(f"resume={run_dir}: {key}={typed} differs from the run's {_differences(key, new, old)}; "
                            f"a resumed run keeps what it measures (drop {key}=..., or start a new run without resume=)")
        OmegaConf.update(merged, key, new, merge=False)
    merged.resume = str(run_dir)
    remove_unstarted_run_dir(merged)  # the run goes on in its own folder: none of Hydra's new ones is left
    return run_dir, merged


def remove_unstarted_run_dir(cfg: DictConfig) -> None:
    """A run that failed before its team started leaves no folder behind (Hydra makes it first), and a resumed
    run none but its own: a new folder Hydra made for it (a multirun's job folder; a single run's is the resumed
    one, see evoteam.__main__) goes while it holds only Hydra's files (.hydra/, the job's .log)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        run_dir = Path(HydraConfig.get().runtime.output_dir)
    except Exception:  # outside Hydra
        return
    if not run_dir.is_dir():
        return
    if cfg.get("resume"):
        if run_dir.resolve() == Path(cfg.resume).resolve() or any(
                p.name != ".hydra" and p.suffix != ".log" for p in run_dir.iterdir()):
            return
    elif (run_dir / "state.json").exists() or (run_dir / "workspace").exists():
        return
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)
    parent = run_dir.parent
    while parent != Path.cwd() and parent.name and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def _finished_earlier(run_dir: Path) -> dict | None:
    state = run_dir / "state.json"
    if not state.is_file():
        return None
    saved = json.loads(state.read_text())
    return saved if saved.get("finished") else None


def _show_finished(run_dir: Path, cfg: DictConfig) -> float | None:
    """A finished run's final table, as it was measured (nothing is run or logged again)."""
    from evoteam.harness.model import WorkloadResult
    from evoteam.task import load_task, shape_label

    results = [WorkloadResult.from_json(r) for r in json.loads((run_dir / "final" / "results.json").read_text())]
    # the workloads at the run's scale (its saved configuration records the one it resolved to): a CPU run's are
    # the scaled-down ones, whose uuids the full-scale list does not hold (the shape column was empty)
    task = load_task(cfg.task.name)
    labels = {w.uuid: shape_label(w) for w in task.scaled_workloads(cfg.task.scale or "full")}
    print(f"evoteam: {run_dir} finished earlier; its final table as measured then (add remeasure=true to "
          f"measure its kernels again):\n{report.format_table(results, labels, 'best')}", flush=True)
    return report.summarize(results).geomean_speedup


CPU_FIGURES = ("evoteam: on a CPU, a speedup is the baseline's CPU time over the candidate's, single-threaded, on the "
               "task's scaled-down problems: it shows the platform's flow, not a GPU's performance. Kernels in plain "
               "PyTorch run natively (real speedups, above and below 1x); Triton kernels run under Triton's "
               "interpreter, about 0.01x, however good they are on a GPU.")


def resolve_target(cfg: DictConfig) -> tuple[Target, DictConfig]:
    """The run's target (evoteam.target: everything that can refuse the run does so here, before the run writes
    anything) and the configuration with what it resolved to recorded: the hardware, the scale, the timing mode,
    the seed."""
    target = Target.resolve(cfg.task.name, cfg.hardware.name, scale=cfg.task.scale, workloads=list(cfg.task.workloads),
                            timing_mode=cfg.timing_mode, executor=cfg.executor.kind.value, executor_cfg=cfg.executor)
    seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31)
    cfg = OmegaConf.merge(cfg, {"hardware": {"name": target.hw.name}, "task": {"scale": target.scale}, "seed": seed,
                                "timing_mode": target.timing_mode})
    return target, cfg


def search_space(target: Target):
    """The task's kernel families usable on this target (the others are named and left out)."""
    from evoteam.families import load_families
    from evoteam.team.offline import SearchSpace

    families = load_families(target.task)
    for f in families:
        if not f.usable_on(target.hw.name):
            print(f"evoteam: family {f.name} left out: verified on {', '.join(f.verified_on)} only, not "
                  f"{target.hw.name} (kernels/{target.task.name}/families.json)", flush=True)
    usable = [f for f in families if f.usable_on(target.hw.name)]
    interpreted = {f.name for f in usable if f.uses_triton and target.hw.interprets_triton}
    return SearchSpace(usable, frozenset(interpreted))


def _check_cli_agents(cfg: DictConfig) -> None:
    """The CLIs the starting team needs are installed (one line saying how, if not)."""
    from evoteam.team import presets
    from evoteam.team.cli_agent import CLIAgent

    for role in presets.from_config(cfg.team, "offline", cfg.agent.kind.value).roles:
        if role.agent != "llm":
            CLIAgent(role, cfg.agent, "", cfg.executor.sandbox.value).binary()


def _new_run_dir(cfg: DictConfig) -> Path:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return run_dir


def run(cfg: DictConfig, command: bool = False) -> float | None:
    """The main job; `command`: this process is `python -m evoteam` itself (its judge server may be forked from it)."""
    from evoteam.team import presets
    from evoteam.team.brief import count_tokens, task_brief
    from evoteam.team.budget import Ledger
    from evoteam.team.cli_agent import CLIAgent
    from evoteam.team.llm_team import LLMTeam
    from evoteam.team.runner import TeamRun
    from evoteam.team.shared_measurements import SharedMeasurements
    from evoteam.team.supervisor import Supervisor
    from evoteam.team.toolbox import HarnessSettings

    run_dir = None
    if cfg.resume:
        run_dir, cfg = _resumed(cfg)
        if _finished_earlier(run_dir) and not cfg.remeasure and (run_dir / "final" / "results.json").is_file():
            return _show_finished(run_dir, cfg)
    target, cfg = resolve_target(cfg)  # everything that can refuse the run does so before the run writes anything
    print(f"evoteam: {target.describe()}", flush=True)
    if not target.hw.is_gpu:
        print(CPU_FIGURES, flush=True)
    _check_cli_agents(cfg)
    if command:
        # the judges' server forked now, before the tracker's and an LLM client's threads start: 1.2 s of CPU less
        # than one started at the first evaluation. Only in the command's own process: a caller of `run` (a test)
        # may have patched the harness's modules.
        from evoteam.harness import judge_server

        judge_server.prestart_for_command(target.executor.kind)
    from evoteam.team import inherit

    inheritance = None if run_dir else inherit.resolve(cfg.workspace.inherit, target.task, target.hw)
    copied = None
    if run_dir is None:
        run_dir = _new_run_dir(cfg)
        if inheritance.kind == "run":
            copied = inherit.copy_run(Path(inheritance.source), run_dir / "workspace", [w.uuid for w in target.workloads])
    settings = HarnessSettings.from_config(cfg, target)
    ledger = Ledger.from_config(cfg.budget, cfg.llm)
    brief = task_brief(target, cfg.task.baseline)
    llm = LLMTeam.from_config(cfg.llm, run_dir, ledger, brief, seed=cfg.seed)
    model = llm.model if llm else "offline"
    preset = presets.from_config(cfg.team, model, cfg.agent.kind.value)
    if llm or any(r.agent != "llm" for r in preset.roles):
        (run_dir / "brief.md").write_text(brief)  # what every LLM or CLI member starts from

    def cli_agents(role):  # a role played by a coding-agent CLI (the preset's, or one the supervisor designs)
        return CLIAgent(role, cfg.agent, brief, cfg.executor.sandbox.value)

    if llm:
        print(f"evoteam: every LLM member starts from the task brief in {run_dir / 'brief.md'} "
              f"({count_tokens(llm.task_brief, model)} tokens)", flush=True)
    tags = {"hardware": target.hw.name, "task": target.task.name, "budget_mode": cfg.budget.mode.value,
            "team_preset": cfg.team.preset.value, "llm": model, "timing_mode": target.timing_mode,
            "seed": str(cfg.seed), "executor": target.executor.kind, "executor_reason": target.executor.reason}
    if inheritance is not None:
        tags["inherit"] = inheritance.describe()  # every preset of a comparison starts from the same
    tracker = tracking.open_tracker(cfg, run_dir, tags=tags)
    tracker.start(config_file=run_dir / "config.yaml")  # before any LLM call: autologging traces them
    team_run = TeamRun(run_dir=run_dir, task=target.task, workloads=list(target.workloads), settings=settings,
                       ledger=ledger, preset=preset, space=search_space(target),
                       supervisor=Supervisor.from_config(cfg.team, target.groups, model,
                                                         llm.redesign if llm else None),
                       seed=cfg.seed, llm_agent_factory=llm.agent if llm else None, cli_agent_factory=cli_agents,
                       on_turn=tracker.sync,
                       evaluator=target.executor.evaluator, bandwidth_ceiling_tbs=target.hw.bandwidth_ceiling_tbs,
                       shared=SharedMeasurements(max_age_hours=cfg.workspace.share_hours))
    agents = sorted({r.agent for r in preset.roles} - {"llm"})
    print(f"evoteam: team {cfg.team.preset.value}; llm {model}{'; agents ' + ', '.join(agents) if agents else ''}; budget {cfg.budget.mode.value}: "
          f"{ledger.token_budget} tokens, {ledger.max_evaluations} evaluations; seed {cfg.seed}; run dir {run_dir}",
          flush=True)
    if inheritance is not None:
        print(f"evoteam: {inherit.describe_for_log(inheritance, copied)}", flush=True)
        if inheritance.kind == "champion":
            try:
                team_run.inherit_champion(inheritance.source)
            except KeyboardInterrupt:  # the measurement in flight is run again when the run resumes
                _interrupted(tracker, run_dir)
    if llm:
        llm.continue_after_checkpoint()
    _search(team_run, tracker, run_dir)
    return _final(team_run, target, tracker, run_dir)


def _search(team_run, tracker, run_dir: Path) -> None:
    """The team's search until its budget or its designs run out; Ctrl-C and LLM failures keep the state."""
    from evoteam.llm import LLMError
    from evoteam.team.runner import RUN_LOG

    try:
        why = team_run.run()
    except KeyboardInterrupt:
        tracker.sync(team_run)
        _interrupted(tracker, run_dir)
    except LLMError as exc:  # after its retries: keep the state, say how to go on
        team_run.checkpoint()
        tracker.sync(team_run)
        tracker.stop("FAILED")
        from evoteam.resources import python_command

        raise UserError(f"{exc}; the run is saved: fix the cause, then "
                        f"{python_command('-m', 'evoteam', f'resume={run_dir}')}") from None
    except BaseException:
        tracker.stop("FAILED")
        raise
    tracker.sync(team_run)
    print(f"\nstopped: {why}; full account: {run_dir / RUN_LOG}\n\nteam history:\n{team_run.history()}\n",
          flush=True)


def _interrupted(tracker, run_dir: Path) -> None:
    """Ctrl-C (or the SIGINT of a time limit): the state is on disk; say how to go on and end with 130."""
    import signal

    from evoteam.team.runner import stop_cleanly

    # The state is saved from here on: a second Ctrl-C (or a late SIGINT) while the tracker and the judge servers are
    # closed would kill the process by the signal, with no exit code of its own (CI, 2026-12-06: -2 instead of 130
    # once). Ignored, it cannot; the closing is bounded (judge_server.KILL_GRACE_S, then SIGKILL).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tracker.stop("KILLED")
    stop_cleanly(run_dir)
    sys.exit(130)


def _write_solutions(target: Target, final_dir: Path, dispatch: dict[str, str]) -> dict[str, str]:
    """Each final kernel as a FlashInfer-Trace solution (final/solutions/<name>.json, what the traces
    name and `python -m evoteam.export --run` carries); its name per dispatch value."""
    from evoteam.harness.candidate import solution_of_path
    from evoteam.trace_writer import solution_name

    names = {}
    for kernel in sorted(set(dispatch.values())):
        path = next((final_dir / "kernels").glob(f"{kernel or 'default'}.*"))  # .py, .cu or .cpp
        name = solution_name(target.task.name, path.read_text())
        solution = solution_of_path(path, target.task.definition.name, name=name)
        solution = replace(solution, spec=replace(solution.spec, target_hardware=(target.hw.name,)))
        out = final_dir / "solutions" / f"{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(solution.to_json(), indent=2) + "\n")
        names[kernel] = name
    return names


def _final(team_run, target: Target, tracker, run_dir: Path) -> float | None:
    """The best verified kernel per workload measured against the baseline side by side: the table,
    the FlashInfer-Trace lines, the tracked final figures."""
    from evoteam.trace_writer import to_trace

    ledger = team_run.ledger
    try:
        print("final: the best verified kernel per workload, measured against the baseline side by side (again, "
              "wherever a team measured a kernel)", flush=True)
        results = team_run.final_measurement(timeout_s=team_run.settings.timeout_s)
        labels, by_uuid = target.labels, target.by_uuid
        traces = run_dir / "final" / "traces.jsonl"
        traces.unlink(missing_ok=True)
        dispatch = json.loads((run_dir / "final" / "dispatch.json").read_text())
        names = _write_solutions(target, run_dir / "final", dispatch)
        for r in results:
            append_traces(traces, [to_trace(target.task.definition.name, by_uuid[r.uuid],
                                            names[dispatch[r.uuid]], r, target.hw.name)])
        table = report.format_table(results, labels, "best", target.hw.bandwidth_ceiling_tbs)
        print(table)
        kernels = sorted(set(dispatch.values()))
        total = ledger.total
        print(f"dispatch: {len(kernels)} kernel(s) ({', '.join(k or 'default' for k in kernels)}); "
              f"evaluations {ledger.evaluations}; tokens {total.total_tokens} (prompt {total.prompt_tokens}, "
              f"completion {total.completion_tokens}); cost ${total.cost_usd:.4f}")
    except KeyboardInterrupt:  # the pieces measured so far are journaled: the resumed run measures the rest
        _interrupted(tracker, run_dir)
    except BaseException:
        tracker.stop("FAILED")
        raise
    tracker.finish(team_run, results, table, labels)
    return report.summarize(results).geomean_speedup
