"""The correctness rules, shared by every task: one candidate output against the reference.

The judge (`evoteam.harness.judge`) applies them to what a sandboxed runner wrote into buffers the
judge owns; `check_kernel` applies them to a trusted kernel called in this process (the kernel
families' own tests). The rules, for untrusted kernels that take any shortcut left open:

* Fresh inputs per trial and per timed call, from a generator seeded by a secret.
* Output buffers are poisoned before every call with a quiet NaN of a distinctive bit pattern
  (`POISON_BITS`), written through an integer view. An element still holding that exact pattern after
  the call was never written; a NaN the kernel computed has another pattern and is reported as a NaN.
* The reference runs on a copy of the inputs that only the judge holds, after the call.
* Inputs are compared bit for bit (through integer views, so NaN payloads and -0.0 count) with that
  copy after every call.
* Return values are ignored: the convention is destination-passing (`entry(**inputs, **outputs)`
  writes into the outputs). Only what is in the buffers counts. (A value-returning Solution's runner
  copies what it returns into the buffers within the call: `runner.deliver`; the same checks follow.)

Checks, in order, the first failure ends the check (`CheckFailure.check`, a `Status` value):
  exception        the kernel raised (type, message and a short traceback tail)
  output_replaced  (in-process only) an output tensor object was re-pointed/resized/re-typed; in the
                   judge, a value-returning solution returned an output of the wrong shape
  output_dtype     (judge) a value-returning solution returned an output of the wrong dtype; what it
                   returned in a form flashinfer-bench does not take (a dict, a wrong count) is an
                   exception, as there (runner.deliver)
  input_modified   an input differs, bit for bit, from the judge's copy
  unwritten        an output element still holds the poison pattern
  nan_inf          a NaN where the reference is not NaN, or an Inf where the reference is not
                   that same Inf (a reference -inf, e.g. the lse of an empty row, must be matched)
  mismatch         |out - ref| > atol and |out - ref| > rtol * (|ref| + 1e-8) for a finite reference
                   element (flashinfer-bench's rule, so what passes here passes there at the same
                   tolerances), or a finite candidate where the reference is +-inf or NaN
  rel_norm         ||out - ref||_2 / ||ref||_2 > max_rel_norm over the finite reference elements
                   (not applied when the reference norm is zero: the element-wise bound governs)

Tolerances come from `task.tolerance(output)`; integer and bool outputs without an override must
match exactly. The recorded errors are flashinfer-bench's: max |out - ref| and max |out - ref| /
(|ref| + 1e-8), Infinity when the output holds an Inf the reference does not, else NaN for a NaN.

Under flashinfer-bench's rule (`fib=True`, EvalRequest.fib_rule) every output is judged as
flashinfer-bench judges it instead, so the verdict is its verdict: atol = rtol = 1e-2 whatever the
dtype, computed in float32 as it computes them, no relative-norm bound, any NaN or Inf in an output
fails (nan_inf). The poison and the inputs are checked as ever.

Deliberately more than flashinfer-bench checks: poisoned outputs (unwritten), inputs unchanged, the
relative norm, fresh inputs per trial and per timed call. Deliberately different: a non-finite output
equal to the reference's (the lse of an empty request is -inf) passes; flashinfer-bench fails any
non-finite output. The comparison is done in float64, in chunks, on the outputs' device (CPU for
devices without float64), so outputs of hundreds of MB are cheap to check.
"""

from __future__ import annotations

import math
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from evoteam.schema import Correctness, Workload, json_float
from evoteam.task import Task, Tolerance
from evoteam.tolerance import FIB_TOLERANCE, RULE_EVOTEAM, RULE_FIB

MIN_TRIALS = 3

# Definition dtype name -> torch dtype.
TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "bool": torch.bool,
}

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _signed(bits: int, nbits: int) -> int:
    return bits - (1 << nbits) if bits >= 1 << (nbits - 1) else bits


# Poison written into every output element before each call, as raw bits of the dtype.
# Floating types get a quiet NaN with a payload that no arithmetic produces (torch's own NaNs are
# 0x7FC00000 / 0xFFFF / 0x7E00 ...). fp8 e4m3fn has only two NaN encodings (0x7F, 0xFF); 0xFF is
# used, which a kernel converting a NaN to fp8 does not normally produce (0x7F), so fp8 detection
# is best effort. Integer outputs get an unlikely sentinel; an element equal to it where the
# reference has the same value cannot be told from "unwritten" and is not flagged.
POISON_BITS: dict[torch.dtype, int] = {
    torch.float32: 0x7FD15EA5,
    torch.float16: 0x7E5A,
    torch.bfloat16: 0x7FE5,
    torch.float64: 0x7FF8_D15E_A5ED_BEEF,
    torch.float8_e4m3fn: 0xFF,
    torch.float8_e5m2: 0xFD,
    torch.int64: 0xA5A5_A5A5_A5A5_A5A5,
    torch.int32: 0xA5A5_A5A5,
    torch.int16: 0xA5A5,
    torch.int8: 0xA5,
    torch.bool: 0xA5,
}

# Elements compared per chunk: cache-sized float64 temporaries on a CPU (several times faster
# than large ones), large ones on an accelerator (fewer host synchronizations).
CPU_CHUNK_ELEMENTS = 1 << 18
REL_EPS = 1e-8  # flashinfer-bench's: relative error = |out - ref| / (|ref| + 1e-8)
DEVICE_CHUNK_ELEMENTS = 1 << 24


def torch_dtype(name: str) -> torch.dtype:
    if name not in TORCH_DTYPES:
        raise NotImplementedError(f"dtype {name!r} is not supported by the checker")
    return TORCH_DTYPES[name]


def trial_seed(base_seed: int, trial: int) -> int:
    """The generator seed of trial `trial` (splitmix64 of base seed and trial, 63 bits)."""
    mask = (1 << 64) - 1
    x = (base_seed + (trial + 1) * 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    x ^= x >> 31
    return x & ((1 << 63) - 1)


def _bits_view(t: torch.Tensor) -> torch.Tensor:
    """The same memory as integers of the same width (torch.bool and 1-byte types as uint8)."""
    return t.view(_INT_VIEW[t.element_size()])


def _poison_value(dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    bits = POISON_BITS[dtype]
    return bits if size == 1 else _signed(bits, 8 * size)  # uint8 view for 1-byte types


def _fmt_index(name: str, index: tuple[int, ...] | None) -> str:
    if not index:
        return name
    return f"{name}[{', '.join(str(i) for i in index)}]"


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def _more(count: int, what: str) -> str:
    return f" and {count - 1} more elements {what}" if count > 1 else f" {what}"


# --------------------------------------------------------------------------- results


@dataclass
class CheckFailure:
    """The first failed check: which check, which tensor, in which trial, where and how much."""

    check: str
    tensor: str
    trial: int
    index: tuple[int, ...] | None
    count: int
    detail: str

    def to_json(self) -> dict:
        return {"check": self.check, "tensor": self.tensor, "trial": self.trial,
                "index": None if self.index is None else list(self.index),
                "count": self.count, "detail": self.detail}

    @classmethod
    def from_json(cls, obj: dict) -> CheckFailure:
        index = obj.get("index")
        return cls(check=obj["check"], tensor=obj["tensor"], trial=int(obj["trial"]),
                   index=None if index is None else tuple(int(i) for i in index),
                   count=int(obj["count"]), detail=obj["detail"])


def worst(*errors: float) -> float:
    """The largest error, a non-finite one kept (max(0.0, nan) is 0.0 in Python): Inf first, else NaN."""
    if any(math.isinf(e) for e in errors):
        return math.inf
    if any(math.isnan(e) for e in errors):
        return math.nan
    return max(errors, default=0.0)


@dataclass
class OutputError:
    """Errors of one output, worst over the trials compared, over elements finite in both; and, whichever rule judged
    the output, flashinfer-bench's verdict on the same elements in the same pass (the `fib_` fields): how many elements
    its rule fails and the errors it records (its float32 arithmetic; Infinity or NaN for a non-finite output)."""

    max_absolute_error: float = 0.0
    max_relative_error: float = 0.0  # over reference elements != 0
    rel_norm: float = 0.0  # ||out - ref||_2 / ||ref||_2 over finite reference elements
    fib_failures: int = 0  # elements flashinfer-bench's rule fails (out of tolerance, or not finite)
    fib_max_absolute_error: float = 0.0
    fib_max_relative_error: float = 0.0

    def update(self, other: OutputError) -> None:
        self.max_absolute_error = worst(self.max_absolute_error, other.max_absolute_error)
        self.max_relative_error = worst(self.max_relative_error, other.max_relative_error)
        self.rel_norm = worst(self.rel_norm, other.rel_norm)
        self.fib_failures += other.fib_failures
        self.fib_max_absolute_error = worst(self.fib_max_absolute_error, other.fib_max_absolute_error)
        self.fib_max_relative_error = worst(self.fib_max_relative_error, other.fib_max_relative_error)

    def to_json(self) -> dict:
        return {"max_absolute_error": json_float(self.max_absolute_error),
                "max_relative_error": json_float(self.max_relative_error),
                "rel_norm": json_float(self.rel_norm), "fib_failures": self.fib_failures,
                "fib_max_absolute_error": json_float(self.fib_max_absolute_error),
                "fib_max_relative_error": json_float(self.fib_max_relative_error)}

    @classmethod
    def from_json(cls, obj: dict) -> OutputError:
        return cls(max_absolute_error=float(obj["max_absolute_error"]),
                   max_relative_error=float(obj["max_relative_error"]),
                   rel_norm=float(obj["rel_norm"]), fib_failures=int(obj.get("fib_failures", 0)),
                   fib_max_absolute_error=float(obj.get("fib_max_absolute_error", 0.0)),
                   fib_max_relative_error=float(obj.get("fib_max_relative_error", 0.0)))


def fib_verdict(errors: dict[str, OutputError]) -> dict:
    """flashinfer-bench's verdict on the outputs compared (WorkloadResult.fib), by its rule (FIB_TOLERANCE in float32,
    every element, any NaN or Inf failing), in its terms: its status (PASSED or INCORRECT_NUMERICAL; the checks before
    the numbers, an exception, a shape or dtype, are the same under both rules) and the errors it would record."""
    failures = sum(e.fib_failures for e in errors.values())
    return {"status": "INCORRECT_NUMERICAL" if failures else "PASSED", "elements_failed": failures,
            "max_absolute_error": json_float(worst(*(e.fib_max_absolute_error for e in errors.values()))),
            "max_relative_error": json_float(worst(*(e.fib_max_relative_error for e in errors.values()))),
            "atol": FIB_TOLERANCE.atol, "rtol": FIB_TOLERANCE.rtol}


@dataclass
class CheckResult:
    passed: bool
    trials: int  # trials run, the failing one included
    base_seed: int  # check_kernel(..., seed=base_seed) reproduces the inputs
    failure: CheckFailure | None = None
    errors: dict[str, OutputError] = field(default_factory=dict)

    @property
    def max_rel_norm(self) -> float:
        return worst(*(e.rel_norm for e in self.errors.values()))

    def summary(self) -> str:
        if self.passed:
            plural = "trial" if self.trials == 1 else "trials"
            return f"PASSED ({self.trials} {plural}, max rel-norm {self.max_rel_norm:.1e})"
        f = self.failure
        assert f is not None
        first_line = f.detail.splitlines()[0] if f.detail else ""
        return f"FAILED {f.check}: {first_line} (trial {f.trial})"

    def to_json(self) -> dict:
        return {"passed": self.passed, "trials": self.trials, "base_seed": self.base_seed,
                "failure": None if self.failure is None else self.failure.to_json(),
                "errors": {k: v.to_json() for k, v in self.errors.items()},
                "summary": self.summary()}

    @classmethod
    def from_json(cls, obj: dict) -> CheckResult:
        failure = obj.get("failure")
        return cls(passed=bool(obj["passed"]), trials=int(obj["trials"]), base_seed=int(obj["base_seed"]),
                   failure=None if failure is None else CheckFailure.from_json(failure),
                   errors={k: OutputError.from_json(v) for k, v in obj.get("errors", {}).items()})

    def to_correctness(self) -> Correctness:
        """The schema's Correctness: worst errors over outputs; per-output details in `extra`."""
        max_rel_norm = self.max_rel_norm
        return Correctness(
            max_relative_error=worst(*(e.max_relative_error for e in self.errors.values())),
            max_absolute_error=worst(*(e.max_absolute_error for e in self.errors.values())),
            extra={
                "max_rel_norm": json_float(max_rel_norm),
                "rel_norm": {k: json_float(v.rel_norm) for k, v in self.errors.items()},
                "outputs": {k: v.to_json() for k, v in self.errors.items()},
                "trials": self.trials,
                "base_seed": self.base_seed,
                "failure": None if self.failure is None else self.failure.to_json(),
            },
        )


# --------------------------------------------------------------------------- checking


def _snapshot(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _meta(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device)


def _exception_detail(exc: BaseException) -> str:
    try:
        message = str(exc).strip()
    except Exception:  # an exception whose __str__ raises
        message = "<unprintable message>"
    if len(message) > 600:
        message = message[:600] + " ..."
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    tail = "".join(traceback.format_list(frames)).rstrip()
    return f"{head}\n{tail}" if tail else head


def _compare_device(device: torch.device) -> torch.device:
    return torch.device("cpu") if device.type == "mps" else device


def _check_inputs(inputs: dict[str, Any], snapshot: dict[str, Any], metas: dict[str, tuple],
                  trial: int) -> CheckFailure | None:
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            continue
        if _meta(value) != metas[name]:
            return CheckFailure("input_modified", name, trial, None, value.numel(),
                                f"input {name}: the tensor itself was changed (storage, shape, strides or dtype)")
        before = snapshot[name]
        now_bits, before_bits = _bits_view(value), _bits_view(before)
        if torch.equal(now_bits, before_bits):
            continue
        diff = (now_bits != before_bits).reshape(-1)
        count = int(diff.sum().item())
        flat = int(torch.argmax(diff.to(torch.uint8)).item())
        index = _unravel(flat, tuple(value.shape))
        seen, expected = value.reshape(-1)[flat].item(), before.reshape(-1)[flat].item()
        return CheckFailure("input_modified", name, trial, index, count,
                            f"input {_fmt_index(name, index)} = {seen!r}, was {expected!r}"
                            f"{_more(count, 'changed') if count > 1 else ''}")
    return None


@dataclass
class _Found:
    count: int = 0
    flat: int | None = None
    seen: float = 0.0
    expected: float = 0.0


def _compare_output(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance,
                    trial: int, fib: bool = False) -> tuple[CheckFailure | None, OutputError]:
    """All checks of one output in one pass over chunks; the failure of the first check in order. `fib`: by
    flashinfer-bench's rule (its arithmetic in float32, every non-finite output element failing)."""
    shape = tuple(out.shape)
    dev = _compare_device(out.device)
    is_float = out.dtype.is_floating_point
    poison = _poison_value(out.dtype)
    poison_value = None  # integer outputs: the poison as a value the reference could also produce
    if not is_float and out.dtype != torch.bool:
        probe = torch.empty(1, dtype=out.dtype)
        _bits_view(probe).fill_(poison)
        poison_value = float(probe.item())
    out_bits = _bits_view(out).reshape(-1)
    out_flat = out.reshape(-1)
    ref_flat = ref.reshape(-1)
    found = {"unwritten": _Found(), "nan_inf": _Found(), "mismatch": _Found()}
    max_abs = max_rel = diff_sq = ref_sq = 0.0
    bad_infs = 0
    fib_failures, fib_abs, fib_rel, fib_inf, fib_nan = 0, 0.0, 0.0, False, False
    n = out_flat.numel()
    work = torch.float32 if fib else torch.float64  # flashinfer-bench's precision: its verdict at the bound too
    chunk = CPU_CHUNK_ELEMENTS if dev.type == "cpu" else DEVICE_CHUNK_ELEMENTS
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        bits = out_bits[start:stop].to(dev)
        r = ref_flat[start:stop].to(dev, work)
        if out.dtype == torch.bool:
            # Poison bytes are not valid bools: compare through the byte view.
            o = (bits != 0).to(work)
        else:
            o = out_flat[start:stop].to(dev, work)
        unwritten = bits == poison
        if poison_value is not None:
            unwritten &= r != poison_value  # the reference's own value there is not "unwritten"
        d = (o - r).abs_()  # finite exactly where both are finite
        r_abs = r.abs()
        # flashinfer-bench's rule on the same elements, whichever rule judges them (its compute_error_stats in
        # float32, and any NaN or Inf in the output failing): recorded beside the verdict, so that an export can give
        # its verdict where the two differ. Under its rule these are the chunk's own tensors.
        if fib:
            o32, r32, d32, r32_abs = o, r, d.clone(), r_abs
        else:
            o32 = o.to(torch.float32) if out.dtype == torch.bool else out_flat[start:stop].to(dev, torch.float32)
            r32 = ref_flat[start:stop].to(dev, torch.float32)
            d32 = (o32 - r32).abs_()
            r32_abs = r32.abs()
        rel32 = d32 / (r32_abs + REL_EPS)
        fib_bad = ((d32 > FIB_TOLERANCE.atol) & (rel32 > FIB_TOLERANCE.rtol)) | ~torch.isfinite(o32)
        both = torch.isfinite(d)
        if bool(both.all()):  # the common case, with fewer passes over the chunk
            nan_inf = bad_inf = torch.zeros_like(both)
            rel = d / (r_abs + REL_EPS)
            mismatch = (d > tol.atol) & (rel > tol.rtol)
        else:
            r_fin, o_fin = torch.isfinite(r), torch.isfinite(o)
            if fib:
                # flashinfer-bench fails any non-finite output; its element mask compares NaN as false, so a finite
                # output where the reference is not finite is not counted there (nor here under its rule)
                bad_inf, nan_inf = torch.isinf(o), ~o_fin
                mismatch = (d > tol.atol) & (d / (r_abs + REL_EPS) > tol.rtol)
            else:
                bad_inf = torch.isinf(o) & (o != r)
                nan_inf = (torch.isnan(o) & ~torch.isnan(r)) | bad_inf
            d.masked_fill_(~both, 0.0)
            r_abs.masked_fill_(~r_fin, 0.0)
            rel = d / (r_abs + REL_EPS)
            if not fib:
                mismatch = (both & (d > tol.atol) & (rel > tol.rtol)) | (~r_fin & o_fin)
        masks = {"unwritten": unwritten, "nan_inf": nan_inf, "mismatch": mismatch}
        # One device-to-host transfer per chunk.
        stats = torch.stack([unwritten.sum(dtype=torch.float64), nan_inf.sum(dtype=torch.float64),
                             mismatch.sum(dtype=torch.float64), d.max().double(), rel.max().double(),
                             (d * d).sum(dtype=torch.float64), (r_abs * r_abs).sum(dtype=torch.float64),
                             bad_inf.sum(dtype=torch.float64), fib_bad.sum(dtype=torch.float64),
                             d32.max().double(), rel32.max().double(), torch.isinf(o32).any().double(),
                             torch.isnan(o32).any().double()]).tolist()
        max_abs, max_rel = max(max_abs, stats[3]), max(max_rel, stats[4])
        diff_sq += stats[5]
        ref_sq += stats[6]
        bad_infs += int(stats[7])
        fib_failures += int(stats[8])
        fib_abs, fib_rel = worst(fib_abs, stats[9]), worst(fib_rel, stats[10])
        fib_inf, fib_nan = fib_inf or bool(stats[11]), fib_nan or bool(stats[12])
        for (key, mask), count in zip(masks.items(), stats[:3]):
            f = found[key]
            if count and f.flat is None:
                local = int(torch.argmax(mask.to(torch.uint8)).item())
                f.flat = start + local
                f.seen = float(o[local].item())
                f.expected = float(r[local].item())
            f.count += int(count)
    ref_norm, diff_norm = math.sqrt(ref_sq), math.sqrt(diff_sq)
    rel_norm = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    if found["nan_inf"].count:  # recorded as flashinfer-bench records them: Inf first, else NaN
        max_abs = max_rel = math.inf if bad_infs else math.nan
    if fib_inf or fib_nan:  # as flashinfer-bench records a non-finite output: Infinity first, else NaN
        fib_abs = fib_rel = math.inf if fib_inf else math.nan
    errors = OutputError(max_absolute_error=max_abs, max_relative_error=max_rel, rel_norm=rel_norm,
                         fib_failures=fib_failures, fib_max_absolute_error=fib_abs, fib_max_relative_error=fib_rel)

    f = found["unwritten"]
    if f.count:
        index = _unravel(f.flat, shape)
        return CheckFailure("unwritten", name, trial, index, f.count,
                            f"{_fmt_index(name, index)}{_more(f.count, 'never written')}"), errors
    f = found["nan_inf"]
    if f.count:
        index = _unravel(f.flat, shape)
        return CheckFailure("nan_inf", name, trial, index, f.count,
                            f"{_fmt_index(name, index)} = {f.seen!r}, expected {f.expected:.6g}"
                            f"{_more(f.count, 'non-finite where the reference is not') if f.count > 1 else ''}"), errors
    f = found["mismatch"]
    if f.count:
        index = _unravel(f.flat, shape)
        err = abs(f.seen - f.expected) if math.isfinite(f.expected) else math.inf
        return CheckFailure("mismatch", name, trial, index, f.count,
                            f"{_fmt_index(name, index)} = {f.seen:.6g}, expected {f.expected:.6g} "
                            f"(|err| {err:.3g} > atol {tol.atol:g} and > rtol {tol.rtol:g} * |ref|)"
                            f"{_more(f.count, 'out of tolerance') if f.count > 1 else ''}"
                            f"; max |err| {max_abs:.3g}"), errors
    if ref_norm > 0 and rel_norm > tol.max_rel_norm:
        return CheckFailure("rel_norm", name, trial, None, n,
                            f"{name}: relative L2 error {rel_norm:.3e} > {tol.max_rel_norm:.1e} "
                            f"(max |err| {max_abs:.3g}, max rel err {max_rel:.3g})"), errors
    return None, errors


def _tolerance(task: Task, name: str) -> Tolerance:
    try:
        return task.tolerance(name)
    except KeyError:
        dtype = task.definition.outputs[name].dtype
        if dtype.startswith("int") or dtype == "bool":
            return Tolerance(atol=0.0, rtol=0.0, max_rel_norm=0.0)
        raise RuntimeError(f"task {task.name}: no tolerance for output {name} of dtype {dtype}; "
                           f"set TOLERANCES[{name!r}] in its task.py") from None


def output_tolerance(task: Task, name: str, fib: bool = False) -> Tolerance:
    """The tolerance an output is judged by: flashinfer-bench's for every output under its rule, else the task's."""
    return FIB_TOLERANCE if fib else _tolerance(task, name)


def rule_record(task: Task, fib: bool = False) -> dict:
    """The pass rule as results and traces record it (WorkloadResult.rule): flashinfer-bench's, or evoteam's with
    each output's tolerances (every one differs from flashinfer-bench's, by its relative-norm bound at least)."""
    if fib:
        return {"rule": RULE_FIB, "atol": FIB_TOLERANCE.atol, "rtol": FIB_TOLERANCE.rtol}
    tolerances = {}
    for name in task.definition.outputs:
        try:
            tol = _tolerance(task, name)
        except RuntimeError:
            continue  # none for this output: its check fails as the harness's error, with the reason
        tolerances[name] = {"atol": tol.atol, "rtol": tol.rtol, "max_rel_norm": tol.max_rel_norm}
    return {"rule": RULE_EVOTEAM, "tolerances": tolerances}


def _allocate_outputs(task: Task, workload: Workload, inputs: dict[str, Any],
                      device: torch.device) -> dict[str, torch.Tensor]:
    shapes = task.output_shapes(workload, inputs)
    outputs = {}
    for name, spec in task.definition.outputs.items():
        outputs[name] = torch.empty(shapes.get(name, ()), dtype=torch_dtype(spec.dtype), device=device)
    return outputs


def poison_outputs(outputs: dict[str, torch.Tensor]) -> None:
    """Fill every output with the poison pattern (also used before timed calls, so that a kernel
    cannot tell a checked call from a timed one)."""
    for out in outputs.values():
        _bits_view(out).fill_(_poison_value(out.dtype))


def compare_with_reference(task: Task, outputs: dict[str, torch.Tensor], reference: dict[str, Any],
                           trial: int, elementwise_factor: float = 1.0,
                           fib: bool = False) -> tuple[CheckFailure | None, dict[str, OutputError]]:
    """Every output against the reference: the failure that comes first in check order, and the errors.
    `elementwise_factor` widens atol and rtol (never the relative-norm bound): only for a library baseline's own
    output (`Baseline.own_check_factor`), never for a candidate's. `fib`: by flashinfer-bench's rule."""
    errors: dict[str, OutputError] = {}
    first: CheckFailure | None = None
    for name, out in outputs.items():
        ref = reference[name]
        if not isinstance(ref, torch.Tensor):
            ref = torch.as_tensor(ref)
        if tuple(ref.shape) != tuple(out.shape):
            raise RuntimeError(f"task {task.name}: reference output {name} has shape {tuple(ref.shape)}, "
                               f"the definition gives {tuple(out.shape)}")
        tol = output_tolerance(task, name, fib)
        if elementwise_factor != 1.0:
            tol = Tolerance(atol=tol.atol * elementwise_factor, rtol=tol.rtol * elementwise_factor,
                            max_rel_norm=tol.max_rel_norm)
        failure, err = _compare_output(name, out, ref, tol, trial, fib)
        errors[name] = err
        if failure is not None and (first is None or _CHECK_ORDER[failure.check] < _CHECK_ORDER[first.check]):
            first = failure  # an earlier check in order on a later output wins
    return first, errors


def compare_inputs(now: dict[str, Any], given: dict[str, Any], trial: int) -> CheckFailure | None:
    """The first input that differs, bit for bit, from the copy the judge kept."""
    for name, value in now.items():
        if isinstance(value, torch.Tensor):
            failure = _check_inputs({name: value}, {name: given[name]}, {name: _meta(value)}, trial)
            if failure is not None:
                return failure
    return None


def check_kernel(task: Task, workload: Workload, kernel: Callable[..., Any], *, trials: int = MIN_TRIALS,
                 seed: int | None = None, device: str | torch.device = "cpu") -> CheckResult:
    """Check `kernel(**inputs, **outputs)` against `task.reference` on `trials` fresh input sets.

    `seed=None` draws a random base seed; the result records it, and passing it back reproduces
    the inputs of every trial. Exceptions raised by the task itself (make_inputs, reference, a
    reference output of the wrong shape) propagate: they are not the kernel's fault.
    """
    if trials < MIN_TRIALS:
        raise ValueError(f"trials must be at least {MIN_TRIALS}, got {trials}")
    device = torch.device(device)
    base_seed = random.SystemRandom().getrandbits(63) if seed is None else int(seed)
    is_cuda = device.type == "cuda"
    errors: dict[str, OutputError] = {}

    def fail(failure: CheckFailure, trial: int) -> CheckResult:
        return CheckResult(passed=False, trials=trial + 1, base_seed=base_seed, failure=failure, errors=errors)

    for trial in range(trials):
        generator = torch.Generator(device=device)
        generator.manual_seed(trial_seed(base_seed, trial))
        inputs = task.make_inputs(workload, generator, device)
        snapshot = _snapshot(inputs)
        input_metas = {k: _meta(v) for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        outputs = _allocate_outputs(task, workload, inputs, device)
        poison_outputs(outputs)
        output_metas = {k: _meta(v) for k, v in outputs.items()}
        if is_cuda:
            torch.cuda.synchronize(device)

        try:
            kernel(**inputs, **outputs)  # return value ignored: destination-passing style
            if is_cuda:
                torch.cuda.synchronize(device)
        except (Exception, SystemExit) as exc:  # any kernel error, exit() included, is a failure
            return fail(CheckFailure("exception", "", trial, None, 0, _exception_detail(exc)), trial)

        for name, out in outputs.items():
            if _meta(out) != output_metas[name]:
                return fail(CheckFailure("output_replaced", name, trial, None, out.numel(),
                                         f"output {name}: the tensor itself was changed (storage, shape, "
                                         f"strides or dtype); write into the given buffer instead"), trial)
        failure = _check_inputs(inputs, snapshot, input_metas, trial)
        if failure is not None:
            return fail(failure, trial)
        del inputs

        # The reference runs on the snapshot only now, so its outputs never coexist with the kernel.
        trial_failure, trial_errors = compare_with_reference(task, outputs, task.reference(snapshot), trial)
        for name, err in trial_errors.items():
            errors.setdefault(name, OutputError()).update(err)
        if trial_failure is not None:
            return fail(trial_failure, trial)
        del snapshot, outputs

    return CheckResult(passed=True, trials=trials, base_seed=base_seed, failure=None, errors=errors)


_CHECK_ORDER = {name: i for i, name in enumerate(
    ["exception", "output_replaced", "output_dtype", "input_modified", "unwritten", "nan_inf", "mismatch",
     "rel_norm"])}
