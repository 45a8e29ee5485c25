"""Output paths of the command-line front doors: checked before any work starts (missing parent folders
created), and written so that a finished result is never lost to a write error.

    check_output_file(path, "--json")           # before the evaluation: a one-line UserError if it cannot be written
    write_output(path, text, "--json", "report")  # after it: on an OSError the text is kept in a file of its own
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from evoteam.errors import UserError


def unwritable_folder(folder: Path) -> str | None:
    """Why `folder` cannot be created (with its parents) and written, or None. Found by trying: what the probe
    creates it removes again."""
    folder = Path(os.path.abspath(folder))
    missing = []
    existing = folder
    while not existing.exists() and not existing.is_symlink():
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        return (f"cannot create {folder}: {existing} is a file, not a folder" if missing
                else f"cannot write {folder}: it is a file, not a folder")
    made: list[Path] = []
    try:
        for path in reversed(missing):
            try:
                path.mkdir()
            except OSError as exc:
                return f"cannot create {path} ({exc.strerror or type(exc).__name__})"
            made.append(path)
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".evoteam-write-probe-")
        except OSError as exc:
            return f"cannot write {folder} ({exc.strerror or type(exc).__name__})"
        os.close(fd)
        os.unlink(probe)
    finally:
        for path in reversed(made):
            try:
                path.rmdir()
            except OSError:  # someone else's file in it by now: theirs to keep
                pass
    return None


def check_output_file(path: Path, flag: str) -> None:
    """`path` (given as `flag`) can be written: its folder is created where missing and takes a new file, and the
    file, where it exists, is a file this process may write. Else a one-line UserError naming the fix."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path}: it is a folder; give the path of a file")
    why = unwritable_folder(path.parent)
    if why is None and path.exists() and not os.access(path, os.W_OK):
        why = f"cannot write {path} (permission denied)"
    if why:
        raise UserError(f"{flag} {path}: {why}; give a path in a writable folder")
    path.parent.mkdir(parents=True, exist_ok=True)  # created here, before the work, not after it


def keep_elsewhere(text: str, name: str) -> Path:
    """`text` in a new file of its own (the temporary folder, else the working directory): where it went."""
    stem, suffix = os.path.splitext(name)
    for folder in (None, os.getcwd()):
        try:
            fd, kept = tempfile.mkstemp(prefix=f"{stem}-", suffix=suffix, dir=folder)
        except OSError:
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return Path(kept)
    raise OSError("neither the temporary folder nor the working directory takes a file")


def write_output(path: Path, text: str, flag: str, what: str, append: bool = False) -> None:
    """Write (or append) `text` to `path`; should that fail after all (the folder removed or the disk full during
    the work), the text is kept in a file of its own and a one-line UserError says where."""
    path = Path(path)
    try:
        with open(path, "a" if append else "w") as fh:
            fh.write(text)
    except OSError as exc:
        kept = keep_elsewhere(text, path.name)
        raise UserError(f"{flag} {path}: cannot write it ({exc.strerror or type(exc).__name__}); the {what} is kept "
                        f"in {kept}: move it where you want it") from None
