"""evoteam works from any working directory after a plain wheel install (the editable install is
what the rest of the suite runs under)."""

import os
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    site = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    wheels = list(dist.glob("evoteam-*.whl"))
    assert len(wheels) == 1
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheels[0])],
                   check=True, capture_output=True, timeout=300)
    return site


def _run(site, cwd, *args):
    # PYTHONPATH comes before the editable install's path entry, so the wheel's copy is imported.
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_wheel_carries_data_and_runs_from_elsewhere(wheel_site, tmp_path):
    probe = _run(wheel_site, tmp_path, "-c",
                 "import evoteam, evoteam.resources as r; from evoteam.task import load_task;"
                 "t = load_task('kda_prefill'); m = load_task('mla_decode');"
                 "print(evoteam.__file__); print(r.data_root()); print(len(m.workloads), t.definition.name)")
    assert probe.returncode == 0, probe.stderr
    module_file, data_root, counts = probe.stdout.strip().splitlines()
    assert module_file.startswith(str(wheel_site))
    assert data_root == str(wheel_site / "evoteam" / "_data")
    assert counts.startswith("47 ")
    assert not (wheel_site / "kernels").exists(), "kernels/ must not become a top-level package"
    for data_dir in ("kernels", "hardware", "conf"):
        assert not (wheel_site / "evoteam" / "_data" / data_dir / "__init__.py").exists()

    composed = _run(wheel_site, tmp_path, "-m", "evoteam", "--cfg", "job", "hardware=mi350x", "task=kda_prefill")
    assert composed.returncode == 0, composed.stderr
    assert "name: mi350x" in composed.stdout and "name: kda_prefill" in composed.stdout

    bad = _run(wheel_site, tmp_path, "-m", "evoteam", "hardware=nope")
    assert bad.returncode == 2 and "hardware=nope is not a known option" in bad.stderr


def test_wheel_ships_what_a_run_reads_and_no_notes_or_sweep_data(wheel_site, tmp_path):
    data = wheel_site / "evoteam" / "_data"
    shipped = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    assert "kernels/mla_decode/champion_h200.json" in shipped and "kernels/mla_decode/workloads.jsonl" in shipped
    unwanted = [p for p in shipped if p.endswith(".md") or "sweep" in p or p.endswith("make_workloads.py")]
    assert not unwanted, unwanted
    # the champion builds from the wheel alone
    built = _run(wheel_site, tmp_path, "-m", "evoteam.sweep", "--build", str(data / "kernels/mla_decode/champion_h200.json"),
                 "--emit-kernel", str(tmp_path / "champion.py"))
    assert built.returncode == 0, built.stderr
    assert "DISPATCH = [\n" in (tmp_path / "champion.py").read_text()
