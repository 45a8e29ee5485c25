"""scripts/build_flashkda.sh: bad input gets one line naming the problem and the fix (the build itself needs nvcc
and a CUDA torch: it ran on the lent H200, docs/results/2026-12-02-h200-flashkda/)."""

import subprocess
import tarfile

from conftest import REPO

SCRIPT = REPO / "scripts" / "build_flashkda.sh"


def _build(*args, env=None):
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60,
                          env=env)


def test_bad_sources_get_one_line(tmp_path):
    cases = [(tmp_path / "missing", "does not exist; give a checkout"),
             (tmp_path, "holds no FlashKDA source (setup.py, csrc/flash_kda.cpp)")]
    junk = tmp_path / "junk.tar.gz"
    junk.write_text("not a tarball")
    cases.append((junk, "is not a .tar.gz of FlashKDA's source"))
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as tar:
        tar.add(tmp_path / "junk.tar.gz", arcname="flash-kda/README.md")
    cases.append((empty, "holds no FlashKDA source"))
    for src, words in cases:
        proc = _build(src, tmp_path / "site")
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_source_without_cutlass_names_the_wheel(tmp_path):
    tree = tmp_path / "flash-kda"
    (tree / "csrc").mkdir(parents=True)
    (tree / "setup.py").write_text("raise SystemExit('not to be run')\n")
    (tree / "csrc" / "flash_kda.cpp").write_text("")
    proc = _build(tree, tmp_path / "site", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert "no CUTLASS" in proc.stderr and "pip install nvidia-cutlass==4.2.0.0" in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("site/*"))  # nothing installed


def _pinned():
    import re

    return re.search(r"^pinned=([0-9a-f]{40})$", SCRIPT.read_text(), re.M).group(1)


def test_the_pin_is_written_once_and_the_image_builds_the_same_commit():
    """scripts/build_flashkda.sh holds the pinned commit; docker/Dockerfile.cuda's default must be that commit."""
    import re

    dockerfile = (REPO / "docker" / "Dockerfile.cuda").read_text()
    assert re.search(r"^ARG FLASHKDA_COMMIT=(\S+)$", dockerfile, re.M).group(1) == _pinned()


def test_a_source_at_another_commit_is_refused_in_one_line(tmp_path):
    """A `git archive` of FlashKDA at a commit other than the pinned one is refused before anything is built, and
    the line says how to build it anyway (FLASHKDA_COMMIT)."""
    import os

    tree = tmp_path / "flash-kda"
    (tree / "csrc").mkdir(parents=True)
    (tree / "setup.py").write_text("raise SystemExit('not to be run')\n")
    (tree / "csrc" / "flash_kda.cpp").write_text("")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(tree), *cmd], check=True, env=env)
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    archive = tmp_path / "FlashKDA-x.tar.gz"
    subprocess.run(["git", "-C", str(tree), "archive", "--format=tar.gz", "--prefix=flash-kda/", "-o", str(archive),
                    "HEAD"], check=True)
    proc = _build(archive, tmp_path / "site")
    assert proc.returncode == 2, proc.stderr
    assert f"at {head[:12]}, not the pinned {_pinned()[:12]}; set FLASHKDA_COMMIT={head}" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not list(tmp_path.glob("site/*"))
    # named, it passes the pin and goes on to the next check (here: CUTLASS, absent)
    proc = _build(archive, tmp_path / "site", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path),
                                                   "FLASHKDA_COMMIT": head})
    assert proc.returncode == 2 and "no CUTLASS" in proc.stderr and "not the pinned" not in proc.stderr, proc.stderr
