"""`python -m evoteam`: the Hydra application.

Bad input is caught before Hydra starts the job (see evoteam.cli_errors): one line on stderr and
exit code 2, never a traceback.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from evoteam import cli_errors, config, resources
from evoteam.errors import EXIT_BAD_INPUT, UserError

config.register()


def _overrides(argv: list[str]) -> list[str]:
    """The KEY=VALUE arguments Hydra will apply (its own flags and hydra.* settings left out)."""
    out = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue
        out.append(arg)
    return out


@hydra.main(config_path=str(resources.conf_dir()), config_name="config", version_base=None)
def _job(cfg: DictConfig) -> float | None:
    from evoteam import mainjob

    try:
        cli_errors.validate(cfg)
        return mainjob.run(cfg, command=True)
    except (UserError, KeyboardInterrupt) as exc:
        mainjob.remove_unstarted_run_dir(cfg)  # a run that never started leaves no folder behind
        if isinstance(exc, KeyboardInterrupt):
            raise
        print(f"evoteam: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def _fixed_sweep_dir(argv: list[str]) -> list[str]:
    """A multirun's folder, absolute and resolved once, here: a launcher that runs the jobs elsewhere (Ray,
    Slurm) would otherwise resolve the relative default in another working directory, at another ${now}."""
    if not {"-m", "--multirun"} & set(argv) or any(a.startswith("hydra.sweep.dir=") for a in argv):
        return argv
    sweep = f"hydra.sweep.dir={Path.cwd() / 'runs' / 'multirun' / time.strftime('%Y-%m-%d_%H-%M-%S')}"
    at = next((i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")), len(argv))
    return [*argv[:at], sweep, *argv[at:]]  # among the overrides (Hydra reads them as one positional run)


def _resume_in_place(argv: list[str]) -> list[str]:
    """`resume=<dir>` (one run): Hydra's folder is the resumed run's own, so that no new runs/<now>/ is made, and
    Hydra writes no .hydra/ there (the run's own records how it started). A
    multirun's job folders are removed by the job (mainjob.remove_unstarted_run_dir)."""
    if {"-m", "--multirun"} & set(argv) or _given(argv, "hydra.run.dir") is not None:
        return argv
    at = next((i for i, a in reversed(list(enumerate(argv))) if not a.startswith("-") and "=" in a
               and a.split("=", 1)[0].lstrip("+") == "resume"), None)
    if at is None or argv[at].split("=", 1)[1] in ("", "null", "''", '""'):
        return argv
    here = [f"hydra.run.dir={argv[at].split('=', 1)[1]}"]  # the value as written: it parsed as resume's
    if _given(argv, "hydra.output_subdir") is None:
        here.append("hydra.output_subdir=null")
    return [*argv[:at + 1], *here, *argv[at + 1:]]


def _given(argv: list[str], key: str) -> str | None:
    """The value the command line gives `key` (its last), as written."""
    values = [a.split("=", 1)[1] for a in argv if not a.startswith("-") and a.split("=", 1)[0].lstrip("+") == key]
    return values[-1] if values else None


# Hydra's flags that print something and run no job (which makes no folder).
PRINT_ONLY = ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc")


def _check_folders(argv: list[str]) -> None:
    """The folder Hydra creates before the job(s) can be created and written: else one line, not Hydra's
    traceback. A single run's `run_dir` (or `resume=`'s folder) is preflight's to check; here the
    hydra.* folders, where their value is a plain path."""
    if any(a.split("=", 1)[0] in PRINT_ONLY for a in argv):
        return
    key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(argv) else "hydra.run.dir"
    value = _given(argv, key)
    if value and not any(c in value for c in "$'\"\\,[]{}()"):
        cli_errors.check_writable(value, key)


def _repeats(argv: list[str]) -> list[str]:
    """`repeat=N`: every configuration of a multirun N times, with seeds 1..N (the sweep dimension
    `seed=range(1,N+1)`, which works with every Hydra launcher); recorded per run as its seed."""
    given = [a for a in argv if a.startswith("repeat=")]
    if not given:
        return argv
    value = given[-1].split("=", 1)[1]
    if not value.isdigit() or int(value) < 1:
        raise cli_errors.ConfigInputError(f"repeat={value}: give a whole number of runs per configuration, e.g. "
                                          f"repeat=3")
    at = argv.index(given[-1])  # the sweep takes the place of repeat=N among the overrides
    rest = [a for a in argv if not a.startswith("repeat=")]
    if any(a.split("=", 1)[0].lstrip("+~") == "seed" for a in rest if "=" in a):
        raise cli_errors.ConfigInputError("give repeat=N or seed=..., not both (repeat=N is seed=range(1,N+1))")
    if int(value) == 1:
        return rest
    if not {"-m", "--multirun"} & set(rest):
        raise cli_errors.ConfigInputError(f"repeat={value} runs each configuration {value} times as a sweep: add -m "
                                          f"(python -m evoteam -m ... repeat={value})")
    at -= sum(1 for a in argv[:at] if a.startswith("repeat="))
    return [*rest[:at], f"seed=range(1,{int(value) + 1})", *rest[at:]]


def main() -> None:
    try:
        argv = _repeats(sys.argv[1:])
        runs = not any(a.split("=", 1)[0] in PRINT_ONLY for a in argv)
        one_job = runs and not {"-m", "--multirun"} & set(argv)
        cli_errors.preflight(_overrides(argv), run_dir=one_job and _given(argv, "hydra.run.dir") is None, writes=runs)
        argv = _fixed_sweep_dir(argv)
        _check_folders(argv)
    except cli_errors.ConfigInputError as exc:
        print(f"evoteam: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    sys.argv = [sys.argv[0], *_resume_in_place(argv)]
    _job()


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main)
