"""The container recipes in docker/: hadolint finds no error in any Dockerfile, base images are
pinned, the images run as a non-root user and keep no secrets, and the spec sheets, the Dockerfiles
and the compose file name the same images."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evoteam import hardware

from conftest import REPO

DOCKERFILES = sorted((REPO / "docker").glob("Dockerfile.*"))


def _hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"  # the dev extra's wheel puts it into the venv
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    if not found:
        if os.environ.get("EVOTEAM_REQUIRE_ENGINE") == "1":
            pytest.fail("EVOTEAM_REQUIRE_ENGINE=1 but hadolint is not installed (pip install -e '.[dev]')")
        pytest.skip("hadolint is not installed (the dev extra installs it: pip install -e '.[dev]')")
    return found


def _stages(text: str) -> list[list[str]]:
    """Instructions per build stage (continuation lines joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", "\n".join(x for x in text.splitlines() if not x.lstrip().startswith("#")))
    stages: list[list[str]] = [[]]
    for line in joined.splitlines():
        if line.startswith("FROM "):
            stages.append([])
        if line.strip():
            stages[-1].append(line.strip())
    return stages


def test_there_is_a_dockerfile_per_vendor_stack():
    assert [p.name for p in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.cuda", "Dockerfile.rocm"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_no_error(dockerfile):
    result = subprocess.run([_hadolint(), "--no-color", "--failure-threshold", "error", str(dockerfile)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_on_an_error(tmp_path):
    """The threshold is real: an error-level rule (DL3004, sudo) fails the lint."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm-20250520\nRUN sudo apt-get update\n")
    result = subprocess.run([_hadolint(), "--no-color", "--failure-threshold", "error", str(bad)],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "DL3004" in result.stdout


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_pinned_non_root_user_no_secrets(dockerfile):
    text = dockerfile.read_text()
    base = re.search(r"^ARG BASE=(\S+)$", text, re.M)
    assert base, "the base image is a build argument with a default"
    name, _, tag = base.group(1).partition("@")[0].rpartition(":")
    assert name and tag and tag != "latest" and re.search(r"\d", tag), base.group(1)
    final = _stages(text)[-1]
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), f"the image must end as a non-root user, not {users}"
    secret = re.compile(r"^(ENV|ARG)\s+\S*(TOKEN|PASSWORD|SECRET|API_KEY|ACCESS_KEY)", re.I | re.M)
    assert not secret.search(text), "no secrets in build arguments or environment (they stay in the layers)"


def test_spec_sheets_dockerfiles_and_compose_agree():
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())["services"]
    built = {svc["image"]: svc["build"]["dockerfile"] for svc in compose.values()}
    for name in hardware.available():
        c = hardware.load_spec(name).container
        assert (REPO / c.dockerfile).is_file(), (name, c.dockerfile)
        assert built.get(c.image) == c.dockerfile, f"{name}: compose builds {c.image} from {built.get(c.image)}"


def test_data_folders_are_not_packages():
    for folder in ("docker", "kernels", "hardware", "mlflow"):
        assert not list((REPO / folder).rglob("__init__.py")), f"{folder}/ is data, not an import package"
