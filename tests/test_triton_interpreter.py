"""evoteam.triton_interpreter: under TRITON_INTERPRET=1, a kernel file loaded by evoteam runs with fewer of the
interpreter's language scans and cheaper dtype lookups and bf16 <-> fp32 conversions, and gives the same results, bit
for bit, as the interpreter left as it is."""

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
    code = ("import sys; from evoteam import triton_interpreter as t; a = t.apply(); "
            "print(a, 'triton' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]  # off: nothing imported, nothing patched
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]  # on, but no kernel imported triton


EQUAL = r"""
import numpy as np
import triton.language as tl
import triton.runtime.interpreter as interpreter
from evoteam import triton_interpreter

convert, np_dtype = interpreter._convert_float, interpreter._get_np_dtype
assert triton_interpreter.apply() and triton_interpreter.apply()  # the second call changes nothing more
fast_convert, fast_np_dtype = interpreter._convert_float, interpreter._get_np_dtype
assert fast_convert is not convert and fast_np_dtype is not np_dtype
rtz, rtne = interpreter._ir.ROUNDING_MODE.RTZ, interpreter._ir.ROUNDING_MODE.RTNE

def same(data, src, dst, rounding):
    want, got = convert(data, src, dst, rounding), fast_convert(data, src, dst, rounding)
    assert want.dtype == got.dtype and want.shape == got.shape, (want.dtype, got.dtype, want.shape, got.shape)
    assert np.array_equal(want, got), (src, dst, rounding, np.flatnonzero(want != got)[:5])
    return got

# every bf16 pattern; without its subnormals (the shortcut), with them (triton's own), strided, 0-d
bf16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
subnormal = ((bf16 & 0x7F80) == 0) & ((bf16 & 0x7F) != 0)
normal = bf16[~subnormal]
for data in (normal, bf16, normal[:65280].reshape(-1, 4)[:, ::2], normal[5:6].reshape(())):
    same(data, tl.bfloat16, tl.float32, None)
# fp32 patterns: every top half (every sign, exponent and bf16 mantissa) with 16 low halves (ties, ends, random)
rng = np.random.default_rng(0)
low = np.concatenate([[0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], rng.integers(0, 1 << 16, 10)]).astype(np.uint32)
fp32 = ((np.arange(1 << 16, dtype=np.uint32) << 16)[:, None] | low[None, :]).ravel()
subnormal = ((fp32 & 0x7F800000) == 0) & ((fp32 & 0x7FFFFF) != 0)
normal = fp32[~subnormal]
for rounding in (None, rtz, rtne):
    for data in (normal, fp32, normal[: len(normal) // 8 * 8].reshape(-1, 8)[:, 1::3]):
        same(data.view(np.float32), tl.float32, tl.bfloat16, rounding)
# other formats are triton's own
same(rng.standard_normal(64).astype(np.float16), tl.float16, tl.float32, None)
# the dtype table, scalars and blocks, pointers; an unknown type raises as before
for ty in (tl.int1, tl.float16, tl.float32, tl.float64, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32,
           tl.int64, tl.uint64, tl.bfloat16, tl.float8e5, tl.float8e5b16, tl.float8e4nv, tl.float8e4b8,
           tl.float8e4b15, tl.pointer_type(tl.float32)):
    for t in (ty, tl.block_type(ty, [4, 8])):
        assert np_dtype(t) == fast_np_dtype(t), t
for lookup in (np_dtype, fast_np_dtype):
    try:
        lookup(tl.void)
        raise SystemExit("no error for void")
    except KeyError:
        pass
print("same")
"""


def _assert_prints_same(script: str) -> None:
    """Run `script` in a fresh process under the interpreter: it ends printing "same" alone."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["same"], out.stderr[-3000:]


def test_the_dtype_table_and_the_bf16_fp32_shortcuts_give_what_triton_gives_bit_for_bit():
    _assert_prints_same(EQUAL)


BLOCKS = r"""
import triton.language as tl
import triton.runtime.interpreter
from evoteam import triton_interpreter

f32, ptr, cptr = tl.float32, tl.pointer_type(tl.float32), tl.pointer_type(tl.float32, const=True)
cases = [(f32, [4, 8]), (f32, [4, 8]), (tl.bfloat16, [4, 8]), (f32, [8, 4]), (ptr, [16]), (cptr, [16]),
         (tl.pointer_type(ptr), [2])]
before = [tl.block_type(*c) for c in cases]
assert tl.block_type(f32, [4, 8]) is not tl.block_type(f32, [4, 8])
assert triton_interpreter.apply()
after = [tl.block_type(*c) for c in cases]
for b, a in zip(before, after):  # what triton built, field for field
    assert (a.name, a.shape, a.numel, str(a.element_ty)) == (b.name, b.shape, b.numel, str(b.element_ty)), (a, b)
    assert a == b and type(a) is type(b)
assert after[0] is after[1] is tl.block_type(f32, [4, 8])  # one per element type and shape
assert len({id(a) for a in after[1:]}) == len(after) - 1  # another type, shape, constness: another block type
assert after[4].element_ty.const is False and after[5].element_ty.const is True


class Sub(tl.block_type):
    pass


assert type(Sub(f32, [4])) is Sub and Sub(f32, [4]) is not Sub(f32, [4])
for shape, error in (([], TypeError), ((4, 8), AssertionError)):  # as triton refuses them
    try:
        tl.block_type(f32, shape)
        raise SystemExit(f"no error for the shape {shape!r}")
    except error:
        pass
print("same")
"""


def test_block_types_are_made_once_per_element_type_and_shape_and_read_as_triton_made_them():
    _assert_prints_same(BLOCKS)
