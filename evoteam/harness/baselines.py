"""Baseline adapters: the library kernels every candidate is measured against.

Each adapter declares the tasks and backends it supports and reports `unavailable: <reason>`
instead of crashing when its library is missing. `prepare(task, workload, inputs)` does the
per-workload set-up that a serving engine would cache (outside the timed region) and returns a
destination-passing callable `fn(**inputs, **outputs)`.

  reference            the task's PyTorch reference (fp32 accumulate); the baseline on CPU
  flashinfer           FlashInfer's BatchMLAPagedAttentionWrapper (MLA decode; 0.7.4 by default, 0.5.3 works too:
                         its version is recorded, a slim 0.7.4 as 0.7.4+sm90mla), options:
                         backend=auto|fa2|fa3, plan=cached (kernel only) | per_call (plan() + run(),
                         timed with the host clock because plan() does host work)
  fla                  fla-core's chunk_kda on its Triton path (FlashKDA routing disabled)
  flashkda             FlashKDA's flash_kda.fwd (CUTLASS, sm_90a/sm_100a; bounded gate only) when flash_kda
                       imports (scripts/build_flashkda.sh builds it from its source)
  flashinfer_kda       FlashInfer's KDA prefill, flashinfer.recurrent_kda (0.7.4; Blackwell sm_100/sm_103 only;
                       UNVERIFIED: no Blackwell GPU here)
  vllm                 vLLM's KDA kernel when vllm imports
  aiter                AITER's MLA decode on ROCm when aiter imports (UNVERIFIED: no AMD GPU here)
  solution             a kernel file of the task's own calling convention, option path=FILE (entry=run): the A/A
                       control (the same kernel as candidate and as baseline must come out 1.00x) and kernel-vs-kernel
                       comparisons; it runs in the trusted runner, so give only code you trust
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import torch

from evoteam.errors import UserError
from evoteam.hardware import HardwareSpec
from evoteam.task import Task


class BaselineUnavailable(UserError):
    """The requested baseline cannot run here; the message says why."""


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _kernel_matches(name: str, seen: str) -> bool:
    """A profiler's kernel name is `name` itself (Triton), a C++ signature with `name` as its function
    (`void ns::name<...>(...)`), or that signature mangled, as torch's profiler on the H100 showed FlashKDA's
    (2026-12-06: `_Z22_flash_kda_fwd_prepareIN4cute...`, the name after its length); `recompute_w_u_fwd_kernel` does
    not match `recompute_w_u_fwd_kda_kernel`."""
    if re.search(rf"(^|[\s:]){re.escape(name)}($|[<(\s])", seen):
        return True
    # Itanium mangling writes each name as <length><name>: the length bounds it at both ends
    return seen.startswith("_Z") and re.search(rf"(?<![0-9]){len(name)}{re.escape(name)}", seen) is not None


def own_kernels_ran(adapter: Baseline, seen: Iterable[str]) -> tuple[bool, str]:
    """Whether a profile's kernel names (`seen`) prove that `adapter`'s own kernels ran, and a one-line account."""
    seen = list(seen)
    if not adapter.kernel_names:
        return False, f"{adapter.name}: no kernel names recorded for this baseline: nothing proves which code ran"
    missing = [n for n in adapter.kernel_names if not any(_kernel_matches(n, s) for s in seen)]
    if missing:
        return False, (f"{adapter.name}: its own kernels did NOT all run: {', '.join(missing)} not in the profile "
                       f"({len(seen)} kernel names seen)")
    return True, f"{adapter.name}: its own kernels ran: {', '.join(adapter.kernel_names)}"


class Baseline:
    name = "baseline"
    tasks: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    module = ""  # the import that must work
    distribution = ""  # the PyPI distribution, for the version
    timing_mode_override: str | None = None
    # The judge checks a baseline's own output before its time counts: an adapter bug would make every speedup
    # meaningless. Element-wise it allows this multiple of the task's atol and rtol (the relative-norm bound and
    # NaN/Inf stay as they are), for a library that computes the same operation at a lower precision.
    own_check_factor: float = 1.0
    # The device kernels (their names as the profiler lists them) that only this library's own code launches: when
    # all of them show up in a profile of one call, the library itself ran, not a fallback behind its name (fla's
    # chunk_kda routes to FlashKDA or TileLang where those import; FlashKDA reached through fla ran fla's Triton path
    # outside inference mode). Empty: not known, so nothing is proven (`own_kernels_ran` says so).
    kernel_names: tuple[str, ...] = ()

    def __init__(self, **options: Any):
        if options:
            raise BaselineUnavailable(f"baseline {self.name} takes no options, got {sorted(options)}")

    @property
    def label(self) -> str:
        return self.name

    @property
    def version(self) -> str:
        return _version(self.distribution) if self.distribution else torch.__version__

    def unavailable_reason(self, task: Task, hw: HardwareSpec) -> str | None:
        if self.tasks and task.name not in self.tasks:
            return f"{self.name} does not implement task {task.name}"
        if hw.backend not in self.backends:
            return f"{self.name} does not run on {hw.backend}"
        if self.module:
            try:
                importlib.import_module(self.module)
            except Exception as exc:  # noqa: BLE001 - any import failure means unavailable
                return f"{self.module} does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        return None

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        raise NotImplementedError


class ReferenceBaseline(Baseline):
    name = "reference"
    backends = ("cpu", "cuda", "rocm")

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        def run(**kwargs: Any) -> None:
            result = task.reference({n: kwargs[n] for n in task.definition.inputs})
            for name, value in result.items():
                kwargs[name].copy_(value)

        return run


class FlashInferMLA(Baseline):
    name = "flashinfer"
    tasks = ("mla_decode",)
    backends = ("cuda",)
    module = "flashinfer.mla"
    distribution = "flashinfer-python"
    WORKSPACE_BYTES = 128 << 20

    def __init__(self, backend: str = "auto", plan: str = "cached"):
        if backend not in ("auto", "fa2", "fa3"):
            raise BaselineUnavailable(f"flashinfer backend={backend} is not one of auto, fa2, fa3")
        if plan not in ("cached", "per_call"):
            raise BaselineUnavailable(f"flashinfer plan={plan} is not one of cached, per_call")
        self.backend, self.plan_mode = backend, plan
        # plan() copies the index arrays to the host and runs a CPU scheduler: only the host clock sees it.
        self.timing_mode_override = "wallclock" if plan == "per_call" else None
        self._workspace: torch.Tensor | None = None

    @property
    def label(self) -> str:
        return f"flashinfer[{self.backend},plan={self.plan_mode}]"

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        import flashinfer.mla

        device = inputs["q_nope"].device
        if self._workspace is None:
            self._workspace = torch.empty(self.WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(self._workspace, backend=self.backend)
        batch, heads, d_ckv = inputs["q_nope"].shape
        d_kpe = inputs["q_pe"].shape[-1]
        page_size = inputs["ckv_cache"].shape[1]
        kv_indptr = inputs["kv_indptr"]
        kv_len = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device=device)
        sm_scale = float(inputs["sm_scale"])

        # FlashInfer 0.7 plans from a metadata object and runs on structural inputs (its flat, positional 0.5 forms
        # still work there but warn); 0.5.3 has only the flat forms. Both: split q/KV tensors, base-2 lse.
        metadata_api = getattr(flashinfer.mla, "MLAPlanMetadata", None)
        shape = dict(num_heads=heads, head_dim_ckv=d_ckv, head_dim_kpe=d_kpe, page_size=page_size, causal=False,
                     sm_scale=sm_scale, q_data_type=inputs["q_nope"].dtype, kv_data_type=inputs["ckv_cache"].dtype)

        def plan() -> None:
            if metadata_api is None:
                wrapper.plan(qo_indptr, kv_indptr, inputs["kv_indices"], kv_len, **shape)
            else:
                wrapper.plan(metadata=metadata_api.csr(qo_indptr, kv_indptr, inputs["kv_indices"], kv_len), **shape,
                             query_layout="split", kv_cache_layout="split", lse_mode="base2")

        if self.plan_mode == "cached":
            plan()
        per_call = self.plan_mode == "per_call"

        def run(**kw: Any) -> None:
            if per_call:
                plan()
            if metadata_api is None:
                wrapper.run(kw["q_nope"], kw["q_pe"], kw["ckv_cache"], kw["kpe_cache"], out=kw["output"],
                            lse=kw["lse"], return_lse=True)
            else:
                wrapper.run(query=(kw["q_nope"], kw["q_pe"]), kv_cache=(kw["ckv_cache"], kw["kpe_cache"]),
                            out=kw["output"], lse=kw["lse"], return_lse=True)

        return run


def _kda_gate_args(kw: dict[str, Any]) -> dict[str, Any]:
    bounded = bool(kw["bounded_gate"])
    return {"lower_bound": float(kw["lower_bound"]) if bounded else None, "safe_gate": bounded}


class FlaChunkKDA(Baseline):
    """fla-core's fused chunk_kda: L2 norm, gate and beta sigmoid inside its Triton kernels."""

    name = "fla"
    tasks = ("kda_prefill",)
    backends = ("cuda", "rocm")
    module = "fla.ops.kda"
    distribution = "fla-core"
    # fla memoises its chunk indices by the identity of cu_seqlens, FLA_TENSOR_CACHE_SIZE (4) entries per
    # function, read when fla is imported. Each input set is its own tensor, so with more than 4 sets every call
    # rebuilt them on the host and copied them over: host time inside fla's events figure, and no graph capture
    # ("Cannot copy between CPU and CUDA tensors during CUDA graph capture", H200, 2026-12-02). Like FlashInfer's
    # plan, this per-batch set-up is a serving engine's once per batch, outside the kernel time measured here.
    tensor_cache_size = 64
    # fla-core 0.6.0's forward on its Triton path, as this adapter calls it (gate inside, both gates): the gate's
    # chunk cumsum (fla/ops/kda/gate.py), the intra pass's fused inter-chunk solve (chunk_intra.py, either gate),
    # w and u (wy_fast.py), the state pass (ops/common/chunk_delta_h.py), the output (ops/gla/chunk.py). Read from
    # the fla-core 0.6.0 wheel; none of them runs where fla hands the call to FlashKDA.
    kernel_names = ("kda_gate_chunk_cumsum_vector_kernel", "chunk_kda_fwd_kernel_inter_solve_fused",
                    "recompute_w_u_fwd_kda_kernel", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
                    "chunk_gla_fwd_kernel_o")

    def __init__(self, **options: Any):
        super().__init__(**options)
        # before unavailable_reason's import of fla: both are read at its import
        os.environ["FLA_FLASH_KDA"] = "0"  # fla's own Triton path even where flash_kda is installed
        os.environ["FLA_TENSOR_CACHE_SIZE"] = str(self.tensor_cache_size)

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        from fla.ops.kda import chunk_kda
        from fla.utils import env

        if env.FLA_TENSOR_CACHE_SIZE < self.tensor_cache_size:
            raise BaselineUnavailable(f"fla was imported before its adapter set FLA_TENSOR_CACHE_SIZE (it holds "
                                      f"{env.FLA_TENSOR_CACHE_SIZE}); create the fla baseline before importing fla")

        cu_seqlens = inputs["cu_seqlens"].to(torch.long)
        cu_seqlens_cpu = cu_seqlens.cpu()

        def run(**kw: Any) -> None:
            o, final = chunk_kda(
                kw["q"].unsqueeze(0), kw["k"].unsqueeze(0), kw["v"].unsqueeze(0), kw["g"].unsqueeze(0),
                kw["beta"].unsqueeze(0), scale=float(kw["scale"]),
                initial_state=kw["initial_state"] if kw["has_initial_state"] else None,
                output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                use_beta_sigmoid_in_kernel=True, A_log=kw["A_log"], dt_bias=kw["dt_bias"],
                cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, **_kda_gate_args(kw))
            kw["output"].copy_(o.squeeze(0))
            kw["final_state"].copy_(final)

        return run


class FlashKDA(Baseline):
    """FlashKDA's own entry point, `flash_kda.fwd`, called directly. Not through fla's chunk_kda: fla 0.6.0
    hands off to FlashKDA only under torch.inference_mode() and otherwise runs its own Triton path under
    this name without a word (its log says `flash_kda rejected: FlashKDA only supports inference mode`).
    FlashKDA takes the raw gate and beta logits and L2-normalises q and k itself, as this task's
    definition does; it keeps the state as [N, H, V, K], so the adapter transposes the initial state in
    and the final state out (inside the timed region: the layout is part of what a caller pays)."""

    name = "flashkda"
    tasks = ("kda_prefill",)
    backends = ("cuda",)
    module = "flash_kda"
    distribution = "flash-kda"
    # FlashKDA accumulates parts of its (I + A)^-1 products in fp16 (its tests' torch_ref: matmul_fp16acc).
    # On the H200 (2026-12-02) its relative errors were 7.9e-3 (o) and 7.1e-3 (final_state), inside the task's
    # 1e-2, but 1-3 final_state elements of the 1k and 4k bounded workloads missed the element-wise bound
    # (|err| up to 0.045 against atol 0.03 at |ref| 1.65).
    own_check_factor = 2.0
    # csrc/smxx/fwd_kernel1.cuh and fwd_kernel2.cuh (MoonshotAI/FlashKDA at the pinned commit, and vLLM's fork):
    # the chunk-local prepare and the recurrence; seen in the H200's profiler on 2026-12-02. The pinned commit also
    # launches `_flash_kda_build_tile_prefix` for varlen inputs (not required: the fork has no such kernel).
    kernel_names = ("_flash_kda_fwd_prepare", "_flash_kda_fwd_recurrence")

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        if not workload.inputs["bounded_gate"].value:
            raise BaselineUnavailable("FlashKDA supports only the bounded gate")
        import flash_kda

        cu_seqlens = inputs["cu_seqlens"].to(torch.long)
        n, h, dk, dv = inputs["initial_state"].shape
        final_vk = torch.empty((n, h, dv, dk), dtype=torch.float32, device=cu_seqlens.device)

        def run(**kw: Any) -> None:
            init = kw["initial_state"].transpose(-1, -2).contiguous() if kw["has_initial_state"] else None
            flash_kda.fwd(kw["q"].unsqueeze(0), kw["k"].unsqueeze(0), kw["v"].unsqueeze(0),
                          kw["g"].unsqueeze(0), kw["beta"].unsqueeze(0), float(kw["scale"]),
                          kw["output"].unsqueeze(0), kw["A_log"], kw["dt_bias"], float(kw["lower_bound"]),
                          initial_state=init, final_state=final_vk, cu_seqlens=cu_seqlens)
            kw["final_state"].copy_(final_vk.transpose(-1, -2))

        return run


def kda_gate(g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, bounded: bool,
             lower_bound: float) -> torch.Tensor:
    """The log-space KDA decay from the raw gate, for kernels that take it precomputed (fp32)."""
    x = g_raw.float() + dt_bias.float().reshape(1, *g_raw.shape[1:])
    a = torch.exp(A_log.float()).reshape(1, -1, 1)
    if bounded:
        return lower_bound * torch.sigmoid(a * x)
    return -a * torch.nn.functional.softplus(x)


class VllmKDA(Baseline):
    """vLLM's KDA kernel. It takes the decay and beta precomputed (vLLM computes them in separate
    ops before the call, and so does this adapter, inside the timed region), keeps its state as
    [N,H,V,K] and writes its output into the caller's v. UNVERIFIED: vLLM could not be installed
    on the lent GPU."""

    name = "vllm"
    tasks = ("kda_prefill",)
    backends = ("cuda", "rocm")
    module = "vllm.model_executor.layers.fla.ops.kda"
    distribution = "vllm"
    # vLLM's own copies (vllm/model_executor/layers/fla/ops/kda.py, read at vLLM commit 00bb9c07, not run here):
    # named unlike fla 0.6.0's (its `recompute_w_u_fwd_kda_kernel`, its fused intra pass)
    kernel_names = ("chunk_kda_scaled_dot_kkt_fwd_kernel_intra_sub_inter", "recompute_w_u_fwd_kernel",
                    "chunk_gated_delta_rule_fwd_kernel_h_blockdim64")

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        kda = importlib.import_module(self.module)
        cu_seqlens = inputs["cu_seqlens"].to(torch.long)

        def run(**kw: Any) -> None:
            g = kda_gate(kw["g"], kw["A_log"], kw["dt_bias"], bool(kw["bounded_gate"]), float(kw["lower_bound"]))
            beta = torch.sigmoid(kw["beta"].float()).to(kw["q"].dtype)
            v = kw["v"].clone().unsqueeze(0)  # vLLM overwrites it with the output
            init = kw["initial_state"].transpose(-1, -2).contiguous() if kw["has_initial_state"] else None
            o, final = kda.chunk_kda(
                kw["q"].unsqueeze(0), kw["k"].unsqueeze(0), v, g.unsqueeze(0), beta.unsqueeze(0),
                scale=float(kw["scale"]), initial_state=init, output_final_state=True,
                use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens)
            kw["output"].copy_(o.squeeze(0))
            kw["final_state"].copy_(final.transpose(-1, -2))

        return run


class FlashInferKDA(Baseline):
    """FlashInfer's KDA prefill, `flashinfer.recurrent_kda` (flashinfer-python 0.7.4), for Blackwell targets only.
    UNVERIFIED: written from the 0.7.4 wheel's source (`flashinfer/kda.py`), never run here (no Blackwell GPU was
    lent). Its prefill backends (CuTe DSL, Cake, cuDNN, TIRx, PTX; `backend=auto` picks by shape) are built for
    SM100/SM103 (B200/GB200, B300/GB300) and SM120; on SM90 none runs, so the adapter refuses other targets
    before it imports anything. It takes the raw gate and beta logits (`use_gate_in_kernel`, `beta_is_logit`),
    L2-normalises q and k itself (the task's `to_recurrent_kda` gives the call, the same mapping as FlashInfer-Trace
    interop), keeps the state as [N, HV, V, K] and updates the state it is given in place:
    the adapter copies the initial state, transposed, into its own buffer (zeros without one) on every call,
    inside the timed region like FlashKDA's transposes. CUDA graph capture of its native backends needs a
    `prefill_workspace` per captured call, which this adapter does not pass: where capture fails, time it by
    events. Option backend=auto|cute-dsl|cute-dsl-persistent|tirx|ptx|cake|small-bh|cudnn."""

    name = "flashinfer_kda"
    tasks = ("kda_prefill",)
    backends = ("cuda",)
    module = "flashinfer"
    distribution = "flashinfer-python"
    arch_targets = ("sm_100", "sm_103")  # hardware/<target>.yaml's arch_target
    kda_backends = ("auto", "cute-dsl", "cute-dsl-persistent", "tirx", "ptx", "cake", "small-bh", "cudnn")

    def __init__(self, backend: str = "auto"):
        if backend not in self.kda_backends:
            raise BaselineUnavailable(f"flashinfer_kda: backend={backend} is not one of {', '.join(self.kda_backends)}")
        self.backend = backend

    @property
    def label(self) -> str:
        return f"{self.name}({self.backend})"

    def unavailable_reason(self, task: Task, hw: HardwareSpec) -> str | None:
        if hw.backend == "cuda" and hw.arch_target not in self.arch_targets:
            return (f"FlashInfer's KDA prefill runs on Blackwell ({', '.join(self.arch_targets)}) only; "
                    f"{hw.name} is {hw.arch_target}")
        return super().unavailable_reason(task, hw)

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        flashinfer = importlib.import_module(self.module)
        to_call = task.module.to_recurrent_kda
        cu_seqlens = inputs["cu_seqlens"].to(torch.long)
        n, h, dk, dv = inputs["initial_state"].shape
        state = torch.empty((n, h, dv, dk), dtype=torch.float32, device=cu_seqlens.device)

        def run(**kw: Any) -> None:
            if kw["has_initial_state"]:
                state.copy_(kw["initial_state"].transpose(-1, -2))
            else:
                state.zero_()
            call = to_call(kw)  # the task's own mapping (kernels/kda_prefill/task.py, docs/interop.md)
            call.update(initial_state=state, cu_seqlens=cu_seqlens, output=kw["output"].unsqueeze(0),
                        backend=self.backend)
            _, final = flashinfer.recurrent_kda(**call)
            kw["final_state"].copy_(final.transpose(-1, -2))

        return run


class AiterMLA(Baseline):
    """AITER's MLA decode on AMD GPUs. UNVERIFIED: written from AITER's documentation."""

    name = "aiter"
    tasks = ("mla_decode",)
    backends = ("rocm",)
    module = "aiter"
    distribution = "aiter"

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        from aiter.mla import mla_decode_fwd

        batch = inputs["q_nope"].shape[0]
        device = inputs["q_nope"].device
        qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device=device)
        kv_last_page_len = torch.ones(batch, dtype=torch.int32, device=device)

        def run(**kw: Any) -> None:
            q = torch.cat([kw["q_nope"], kw["q_pe"]], dim=-1)
            kv = torch.cat([kw["ckv_cache"], kw["kpe_cache"]], dim=-1).unsqueeze(2)
            mla_decode_fwd(q, kv, kw["output"], qo_indptr, kw["kv_indptr"], kw["kv_indices"], kv_last_page_len,
                           1, sm_scale=float(kw["sm_scale"]))
            # This call gives no base-2 lse; the baseline is timed, not checked, so lse stays unset.

        return run


class SolutionBaseline(Baseline):
    name = "solution"
    backends = ("cpu", "cuda", "rocm")

    def __init__(self, path: str = "", entry: str = "run"):
        if not path or not os.path.isfile(path):
            raise BaselineUnavailable(f"baseline solution needs path=FILE of a kernel (got {path!r}); e.g. "
                                      f"--baseline solution --baseline-option path=kernels/mla_decode/seed_triton.py")
        self.path, self.entry = os.path.abspath(path), entry
        self._fn: Callable[..., None] | None = None

    @property
    def label(self) -> str:
        return f"solution[{os.path.basename(self.path)}]"

    @property
    def version(self) -> str:  # its content: a baseline cache entry serves this exact file only
        import hashlib

        with open(self.path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        if self._fn is None:
            import importlib.util
            import sys

            folder = os.path.dirname(self.path)
            if folder not in sys.path:
                sys.path.insert(0, folder)  # a solution's other files import as modules, as for a candidate
            spec = importlib.util.spec_from_file_location("evoteam_baseline_solution", self.path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            fn = getattr(module, self.entry, None)
            if not callable(fn):
                raise BaselineUnavailable(f"{self.path} defines no callable {self.entry!r}")
            self._fn = fn
        return self._fn


ADAPTERS: dict[str, type[Baseline]] = {
    "reference": ReferenceBaseline,
    "flashinfer": FlashInferMLA,
    "fla": FlaChunkKDA,
    "flashkda": FlashKDA,
    "flashinfer_kda": FlashInferKDA,
    "vllm": VllmKDA,
    "aiter": AiterMLA,
    "solution": SolutionBaseline,
}

# baseline=auto: the first available, per backend; the reference is the last resort.
AUTO_ORDER = {"cpu": ["reference"], "cuda": ["flashinfer", "fla", "reference"],
              "rocm": ["aiter", "fla", "reference"]}


def create(name: str, task: Task, hw: HardwareSpec, **options: Any) -> Baseline:
    if name == "auto":
        for candidate in AUTO_ORDER[hw.backend]:
            adapter = ADAPTERS[candidate](**(options if candidate != "reference" else {}))
            if adapter.unavailable_reason(task, hw) is None:
                return adapter
        raise BaselineUnavailable(f"no baseline available for task {task.name} on {hw.name}")
    cls = ADAPTERS.get(name)
    if cls is None:
        raise BaselineUnavailable(f"baseline {name!r} is not known; allowed: auto, {', '.join(ADAPTERS)}")
    adapter = cls(**options)
    reason = adapter.unavailable_reason(task, hw)
    if reason:
        raise BaselineUnavailable(f"baseline {name} is unavailable: {reason}")
    return adapter
