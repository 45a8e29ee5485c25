"""Where the repository's data folders are, in a source checkout and in an installed wheel.

`kernels/`, `hardware/` and `conf/` live at the top of the repository (they are data, not
import packages). An editable install reads them there; a wheel carries copies under
`evoteam/_data/` (see pyproject.toml), so the same code works from any working directory.
"""

from __future__ import annotations

import os
import shlex
import sys
from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def data_root() -> Path:
    bundled = _PACKAGE_DIR / "_data"
    if (bundled / "kernels").is_dir():
        return bundled
    checkout = _PACKAGE_DIR.parent
    if (checkout / "kernels").is_dir():
        return checkout
    raise FileNotFoundError(
        f"evoteam data folders not found next to {_PACKAGE_DIR}: reinstall evoteam (pip install .)"
    )


def kernels_dir() -> Path:
    return data_root() / "kernels"


def hardware_dir() -> Path:
    return data_root() / "hardware"


def conf_dir() -> Path:
    return data_root() / "conf"


def cache_root() -> Path:
    """The folder of evoteam's caches kept between runs (baseline timings, shared measurements, container
    caches): $EVOTEAM_CACHE_DIR, else ~/.cache/evoteam."""
    return Path(os.environ.get("EVOTEAM_CACHE_DIR") or Path.home() / ".cache" / "evoteam")


def python_command(*args: str) -> str:
    """`python ARGS` as a shell command that runs as printed: this interpreter's own path (a virtual
    environment's, which need not be active where the command is pasted), every part quoted for the shell."""
    return " ".join(shlex.quote(str(a)) for a in (sys.executable, *args))
