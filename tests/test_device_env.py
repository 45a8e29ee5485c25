"""scripts/device_env.sh: the autotuning cache that outlives a device machine (use_autotune_cache), run by bash."""

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_script(body: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    script = f'. "{ROOT}/scripts/device_env.sh"\n{body}\n'
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **env})


def test_autotuning_results_are_saved_on_exit_and_restored_by_the_next_call(tmp_path):
    cache1, out1 = tmp_path / "cache1", tmp_path / "out1"
    first = run_script(f'use_autotune_cache "{out1}" "{cache1}"\n'
                       'echo "TRITON_CACHE_AUTOTUNING=$TRITON_CACHE_AUTOTUNING TRITON_CACHE_DIR=$TRITON_CACHE_DIR"\n'
                       'mkdir -p "$TRITON_CACHE_DIR/AB12" && echo "{}" > "$TRITON_CACHE_DIR/AB12/k.autotune.json"\n'
                       'echo "compiled" > "$TRITON_CACHE_DIR/AB12/k.cubin"', tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"TRITON_CACHE_AUTOTUNING=1 TRITON_CACHE_DIR={cache1}" in first.stdout
    with tarfile.open(out1 / "autotune.tgz") as archive:
        assert sorted(archive.getnames()) == ["./AB12/k.autotune.json"]  # the results, not the compiled kernels

    cache2, out2 = tmp_path / "cache2", tmp_path / "out2"
    second = run_script(f'use_autotune_cache "{out2}" "{cache2}"', tmp_path, AUTOTUNE_IN=str(out1 / "autotune.tgz"))
    assert second.returncode == 0, second.stderr
    assert (cache2 / "AB12" / "k.autotune.json").read_text() == "{}\n"
    assert "autotuning restored" in second.stdout


def test_nothing_to_save_leaves_no_archive(tmp_path):
    done = run_script(f'use_autotune_cache "{tmp_path / "out"}" "{tmp_path / "cache"}"', tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "out" / "autotune.tgz").exists()  # an empty one would take one of the 8 files back
