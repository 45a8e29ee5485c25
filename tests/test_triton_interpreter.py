"""evoteam.triton_interpreter: under TRITON_INTERPRET=1, a kernel file loaded by evoteam runs with fewer of the
interpreter's language scans and gives the same results, bit for bit, as the interpreter left as it is."""

import json
import os
import subprocess
import sys

from conftest import REPO

SCRIPT = r"""
import importlib.util, json, sys
import torch
import triton.runtime.interpreter as interpreter

scans = 0
scan = interpreter._patch_builtin
def counted(*args, **kwargs):
    global scans
    scans += 1
    return scan(*args, **kwargs)
interpreter._patch_builtin = counted

path = sys.argv[2]
if sys.argv[1] == "evoteam":
    from evoteam.task import load_module_from_path
    module = load_module_from_path(path)
else:  # imported as it is: the interpreter unchanged
    spec = importlib.util.spec_from_file_location("interp_kernel", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["interp_kernel"] = module
    spec.loader.exec_module(module)
x = torch.linspace(-2, 2, 16)
outs = [module.run(x).tolist(), module.run(x * 3).tolist()]  # two launches: each patches and undoes its own
print(json.dumps({"outs": outs, "scans": scans,
                  "applied": bool(getattr(interpreter, "_evoteam_skips_repeated_patching", False))}))
"""


def _run(how: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, how, str(REPO / "tests" / "data" / "interp_kernel.py")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_kernel_loaded_by_evoteam_scans_less_and_computes_the_same():
    plain, evoteam = _run("plain"), _run("evoteam")
    assert not plain["applied"] and evoteam["applied"]
    assert evoteam["outs"] == plain["outs"]  # bit for bit, both launches
    # each launch scans its language modules once; the plain interpreter again at each of the 4 + 4 device calls
    assert evoteam["scans"] < plain["scans"] / 2, (evoteam["scans"], plain["scans"])


def test_nothing_is_patched_without_the_interpreter_or_triton():
    code = ("import sys; from evoteam import triton_interpreter as t; a = t.skip_repeated_patching(); "
            "print(a, 'triton' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]  # off: nothing imported, nothing patched
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]  # on, but no kernel imported triton
