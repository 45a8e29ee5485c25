"""Triton's interpreter (TRITON_INTERPRET=1, how a CPU target runs Triton kernels) without its largest avoidable cost.

Triton 3.x's interpreter patches triton.language's builtins (inspect.getmembers over the language module, its tensor
class and math, then a wrapper set per builtin) at every kernel launch, undoing them when the launch ends, and again at
every call of a @triton.jit device function inside the launch, where the patches are already there and the call's
are never undone. A kernel that calls small device functions in its loops pays that scan thousands of times: a
3-trial check of the KDA chunk kernel took 12.4 CPU-s, 8.8 with the scans skipped (2026-12-05, triton 3.9).

`skip_repeated_patching()` makes a device call scan only for language modules its launch has not patched yet (a
device function of triton's own library sees `triton.language.core`, which the kernel's launch does not patch: that
is done once, at its first call in the launch, as before). What the interpreter computes is unchanged. It is applied
where evoteam loads a kernel file while the interpreter is on (evoteam.task.load_module_from_path, the runner's
candidate), once per process, and only where triton is already imported. A Triton without these internals is left
as it is.
"""

from __future__ import annotations

import inspect
import os
import sys

_APPLIED = "_evoteam_skips_repeated_patching"


def on() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def skip_repeated_patching() -> bool:
    """Patch triton's interpreter (once per process) where it is on and imported; whether it is patched now."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    if not on() or interpreter is None:
        return False
    if getattr(interpreter, _APPLIED, False):
        return True
    patch_lang = getattr(interpreter, "_patch_lang", None)
    grid_executor = getattr(interpreter, "GridExecutor", None)
    if not callable(patch_lang) or not isinstance(grid_executor, type):
        return False  # another Triton: left as it is
    import triton.language as tl

    patched: list[frozenset | None] = []  # per launch in progress: the language modules it has patched so far

    class _NothingToUndo:
        @staticmethod
        def restore() -> None:
            pass

    def languages(fn) -> frozenset:
        return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and (v is tl or v is tl.core))

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
    setattr(interpreter, _APPLIED, True)
    return True
