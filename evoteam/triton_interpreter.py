"""Triton's interpreter (TRITON_INTERPRET=1, how a CPU target runs Triton kernels) without its largest avoidable costs.

`apply()` (once per process, where the interpreter is on and triton is imported; a Triton without these internals is
left as it is) makes four changes, none of which changes a bit of what the interpreter computes:

1. Triton 3.x's interpreter patches triton.language's builtins (inspect.getmembers over the language module, its
   tensor class and math, then a wrapper set per builtin) at every kernel launch, undoing them when the launch ends,
   and again at every call of a @triton.jit device function inside the launch, where the patches are already there
   and the call's are never undone. A kernel that calls small device functions in its loops pays that scan thousands
   of times: a 3-trial check of the KDA chunk kernel took 12.4 CPU-s, 8.8 with the scans skipped (2026-12-05,
   triton 3.9). Here a device call scans only for language modules its launch has not
   patched yet (a device function of triton's own library sees `triton.language.core`, which the kernel's launch
   does not patch: that is done once, at its first call in the launch, as before).
2. `_get_np_dtype` (the numpy dtype of a Triton type, asked at nearly every operation) built its 18-entry table anew
   at every call: the table is built once.
3. `_convert_float`, the bit-level float conversion behind every bf16 <-> fp32 cast, runs about fifteen array
   passes for any pair of formats. For those two directions without rounding (a cast; fp_to_fp other than
   round-to-nearest-even) and without a subnormal among the inputs, its result is, bit for bit, the bf16 pattern
   shifted into fp32's top half, or fp32's top half (truncation): one pass. Any other call, a subnormal input among
   them, goes to triton's own function. tests/test_triton_interpreter.py checks the shortcut against it on all 65,536
   bf16 patterns and on fp32 patterns of every exponent.
4. `triton.language.block_type`, every operation's result type, is made once per element type and shape (see
   `_block_types_made_once`): a KDA chunk check and the MLA flash-decoding tests 47.5 to 43.2 CPU-s (two runs each,
   alternating, 2026-12-07, triton 3.9).

Where evoteam applies it: where it loads a kernel file while the interpreter is on (evoteam.task.load_module_from_path)
and the runner's candidate. Measured (2026-12-06, py-spy over tests/test_kda_chunk.py) before 2 and 3: `_convert_float`
took about 16% of those tests' time, `_get_np_dtype` 7.5%, and 1's reading of a device function's globals at every
call (now once per function) 3%. The interpreter-heavy test files (test_kda_chunk, test_families,
test_mla_flashdecode, test_kda_task) took 101.3 CPU-s with these changes, 125.8 without, one after the other.
"""

from __future__ import annotations

import inspect
import os
import sys
import weakref

_APPLIED = "_evoteam_skips_repeated_patching"


def on() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _interpreter():
    """triton's interpreter module where the interpreter is on and triton imported, with the internals these changes
    replace; else None."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    if not on() or interpreter is None:
        return None
    needed = ("_patch_lang", "_get_np_dtype", "_convert_float")
    if not all(callable(getattr(interpreter, name, None)) for name in needed):
        return None
    if not isinstance(getattr(interpreter, "GridExecutor", None), type):
        return None
    return interpreter


def apply() -> bool:
    """Make triton's interpreter cheaper (once per process) where it is on and imported; whether it is changed now."""
    interpreter = _interpreter()
    if interpreter is None:
        return False  # off, not imported, or another Triton: left as it is
    if not getattr(interpreter, _APPLIED, False):
        _skip_repeated_patching(interpreter)
        _np_dtype_table_built_once(interpreter)
        _bf16_fp32_conversions_in_one_pass(interpreter)
        _block_types_made_once()
        setattr(interpreter, _APPLIED, True)
    return True


def _skip_repeated_patching(interpreter) -> None:
    import triton.language as tl

    patch_lang, grid_executor = interpreter._patch_lang, interpreter.GridExecutor
    patched: list[frozenset | None] = []  # per launch in progress: the language modules it has patched so far

    class _NothingToUndo:
        @staticmethod
        def restore() -> None:
            pass

    # A function's globals are its module's, filled when the module ran, before any launch: read once per function.
    seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def languages(fn) -> frozenset:
        try:
            return seen[fn]
        except (KeyError, TypeError):
            pass
        langs = frozenset(id(v) for v in fn.__globals__.values()
                          if inspect.ismodule(v) and (v is tl or v is tl.core))
        try:
            seen[fn] = langs
        except TypeError:  # not weakly referable: not remembered
            pass
        return langs

    def patch_once(fn):
        langs = languages(fn)
        if patched and patched[-1] is not None and langs <= patched[-1]:
            return _NothingToUndo()  # a device call inside a launch that has patched these already
        scope = patch_lang(fn)
        if patched:
            patched[-1] = langs | (patched[-1] or frozenset())
        return scope

    launch = grid_executor.__call__

    def launch_tracked(self, *args, **kwargs):
        patched.append(None)
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    interpreter._patch_lang = patch_once
    grid_executor.__call__ = launch_tracked


def _np_dtype_table_built_once(interpreter) -> None:
    import numpy as np
    import triton.language as tl

    original = interpreter._get_np_dtype
    # triton's own table, its entries asked of triton's function (so a Triton that stores a type differently is
    # followed); a type it lacks still raises, from triton's function
    table = {}
    for name in ("int1", "float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                 "int64", "uint64", "bfloat16", "float8e5", "float8e5b16", "float8e4nv", "float8e4b8", "float8e4b15"):
        ty = getattr(tl, name, None)
        if ty is not None:
            table[ty] = original(ty)
    pointer, block = tl.pointer_type, tl.block_type
    u64 = np.dtype(np.uint64)

    def get_np_dtype(tt_dtype):
        if isinstance(tt_dtype, pointer):
            return u64
        if isinstance(tt_dtype, block):
            tt_dtype = tt_dtype.element_ty
            if isinstance(tt_dtype, pointer):
                return u64
        found = table.get(tt_dtype)
        return found if found is not None else original(tt_dtype)

    interpreter._get_np_dtype = get_np_dtype


def bf16_to_fp32_bits(bits):
    """fp32 bit patterns (uint32) of bf16 bit patterns (uint16) without subnormals: the pattern in the top half."""
    import numpy as np

    return bits.astype(np.uint32, order="C") << np.uint32(16)


def fp32_to_bf16_bits(data):
    """bf16 bit patterns (uint16) of fp32 values without subnormals, truncated: their top half."""
    import numpy as np

    return (data.view(np.uint32) >> np.uint32(16)).astype(np.uint16, order="C")


def _has_subnormal(bits, exponent_mask: int, mantissa_mask: int) -> bool:
    zero_exponent = (bits & exponent_mask) == 0
    return bool(zero_exponent.any()) and bool((zero_exponent & ((bits & mantissa_mask) != 0)).any())


def _bf16_fp32_conversions_in_one_pass(interpreter) -> None:
    import numpy as np
    import triton.language as tl

    original = interpreter._convert_float
    rtne = interpreter._ir.ROUNDING_MODE.RTNE
    bf16, fp32 = tl.bfloat16, tl.float32
    bf16_exponent, bf16_mantissa = np.uint16(0x7F80), np.uint16(0x007F)
    fp32_exponent, fp32_mantissa = np.uint32(0x7F800000), np.uint32(0x007FFFFF)

    def convert_float(input, input_dtype, output_dtype, rounding_mode):
        # a subnormal input goes to triton's own function, as does any other pair of formats or rounding
        if isinstance(input, np.ndarray):
            if input_dtype == bf16 and output_dtype == fp32 and input.dtype.itemsize == 2:
                bits = input.view(np.uint16)
                if not _has_subnormal(bits, bf16_exponent, bf16_mantissa):
                    return bf16_to_fp32_bits(bits)
            elif (input_dtype == fp32 and output_dtype == bf16 and input.dtype.itemsize == 4
                  and rounding_mode != rtne):
                if not _has_subnormal(input.view(np.uint32), fp32_exponent, fp32_mantissa):
                    return fp32_to_bf16_bits(input)
        return original(input, input_dtype, output_dtype, rounding_mode)

    interpreter._convert_float = convert_float


def _block_types_made_once() -> None:
    """One `triton.language.block_type` per element type and shape: every operation's result type was built anew
    (its shape unwrapped and validated, its name formatted), 307,392 of them in one KDA chunk check. A block type is
    set up in its constructor and never changed after, and is compared by value (`__eq__`), so a shared one is the
    same to every reader. Shapes given in a form the key cannot hash are built as before."""
    import triton.language.core as core

    block, pointer = core.block_type, core.pointer_type
    made: dict = {}
    build = block.__init__

    def new(cls, element_ty, shape):
        if cls is not block:  # a subclass: as before
            return object.__new__(cls)
        try:
            # a pointer type has no hash (its class defines __eq__ alone): keyed by what its __eq__ compares
            kind = ((pointer, element_ty.element_ty, element_ty.address_space, element_ty.const)
                    if type(element_ty) is pointer else element_ty)
            key = (kind, type(shape), tuple(shape))  # a shape's type too: triton takes a list, not every sequence
            found = made.get(key)
        except TypeError:  # unhashable: as before
            return object.__new__(cls)
        if found is None:
            found = object.__new__(cls)
            build(found, element_ty, shape)
            made[key] = found
        return found

    def init(self, element_ty, shape):
        if "name" not in self.__dict__:  # not one made here (a subclass, an unhashable shape)
            build(self, element_ty, shape)

    block.__new__ = new
    block.__init__ = init
