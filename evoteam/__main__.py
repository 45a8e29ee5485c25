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
        return mainjob.run(cfg)
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
    return [*argv, f"hydra.sweep.dir={Path.cwd() / 'runs' / 'multirun' / time.strftime('%Y-%m-%d_%H-%M-%S')}"]


def main() -> None:
    try:
        cli_errors.preflight(_overrides(sys.argv[1:]))
    except cli_errors.ConfigInputError as exc:
        print(f"evoteam: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    sys.argv = [sys.argv[0], *_fixed_sweep_dir(sys.argv[1:])]
    _job()


if __name__ == "__main__":
    main()
