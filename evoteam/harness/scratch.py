"""Scratch folders of evaluations. All live under one folder per user, `$TMPDIR/evoteam-<uid>/`, each
named after the process that made it (`<kind>-<pid>-<random>`): the process removes its own when it
ends, and the next one to make a folder removes those whose process is gone (a killed run's)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def root() -> Path:
    return Path(tempfile.gettempdir()) / f"evoteam-{os.getuid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_orphans() -> list[Path]:
    """Remove the scratch folders whose process no longer runs; returns them."""
    removed = []
    folder = root()
    if not folder.is_dir():
        return removed
    for entry in folder.iterdir():
        parts = entry.name.split("-")
        if len(parts) >= 3 and parts[1].isdigit() and not _alive(int(parts[1])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def make(kind: str) -> Path:
    """A new private scratch folder of this process (after removing orphans)."""
    folder = root()
    folder.mkdir(mode=0o700, exist_ok=True)
    remove_orphans()
    path = Path(tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}-", dir=folder))
    os.chmod(path, 0o700)
    return path
