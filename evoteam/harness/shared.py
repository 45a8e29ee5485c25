"""Memory the judge owns and a runner maps: the only things a runner sees of an evaluation.

The judge allocates every input and output buffer; a runner receives file descriptors (over its
Unix socket, SCM_RIGHTS) and maps them, so nothing depends on paths or on sharing a PID namespace:
- on a CPU, sealed memfds: a buffer the runner may only read is sealed against new writable
  mappings (F_SEAL_FUTURE_WRITE), so a candidate that writes to its inputs faults;
- on a GPU, device memory from the CUDA driver's virtual memory API exported as file descriptors
  (`cudadrv`); the runner could write its inputs there, so the judge compares them after every call.
A small host page (memfd) carries the words that order the judge's and the runner's GPU work.
"""

from __future__ import annotations

import fcntl
import mmap
import os
from dataclasses import dataclass, field

import torch

ALIGN = 256  # bytes: every tensor in a buffer starts at a multiple of this
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 16)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int64": torch.int64,
    "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class TensorRef:
    """A tensor inside a shared buffer: which buffer, where, and its shape and dtype."""

    buffer: int
    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        n = DTYPES[self.dtype].itemsize
        for s in self.shape:
            n *= s
        return n

    def to_json(self) -> dict:
        return {"buffer": self.buffer, "offset": self.offset, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, obj: dict) -> TensorRef:
        return cls(buffer=int(obj["buffer"]), offset=int(obj["offset"]), shape=tuple(obj["shape"]),
                   dtype=str(obj["dtype"]))


def _view(base: torch.Tensor, ref: TensorRef) -> torch.Tensor:
    return base[ref.offset:ref.offset + ref.nbytes].view(DTYPES[ref.dtype]).view(ref.shape)


# ------------------------------------------------------------------------------------------ judge side


@dataclass
class _Buffer:
    id: int
    nbytes: int
    runner_writable: bool
    base: torch.Tensor  # uint8 view of the whole buffer in the judge's process
    fd: int
    handle: object = None  # cudadrv.Mapping (GPU) or mmap (CPU)
    used: int = 0


@dataclass
class Arena:
    """The judge's shared buffers of one workload, on `device` ("cpu" or "cuda:N")."""

    device: str
    buffers: list[_Buffer] = field(default_factory=list)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def device_index(self) -> int:
        return torch.device(self.device).index or 0

    def buffer(self, nbytes: int, *, runner_writable: bool) -> int:
        """A new buffer of at least `nbytes`; its id."""
        nbytes = max(ALIGN, aligned(nbytes))
        if self.is_cuda:
            from evoteam.harness import cudadrv

            mapping = cudadrv.allocate(nbytes, self.device_index)
            nbytes = mapping.size  # rounded to the allocation granularity: what a runner maps
            base = cudadrv.byte_tensor(mapping.ptr, mapping.size, self.device_index)
            fd = cudadrv.export_fd(mapping)
            handle: object = mapping
        else:
            fd = os.memfd_create("evoteam-buffer", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, nbytes)
            handle = mmap.mmap(fd, nbytes)
            base = torch.frombuffer(handle, dtype=torch.uint8)
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | (0 if runner_writable else F_SEAL_FUTURE_WRITE)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        self.buffers.append(_Buffer(len(self.buffers), nbytes, runner_writable, base, fd, handle))
        return len(self.buffers) - 1

    def place(self, buffer: int, shape: tuple[int, ...], dtype: torch.dtype) -> TensorRef:
        """Reserve the next aligned slot of `buffer` for a tensor."""
        buf = self.buffers[buffer]
        ref = TensorRef(buffer, buf.used, tuple(int(s) for s in shape), DTYPE_NAMES[dtype])
        if ref.offset + ref.nbytes > buf.nbytes:
            raise ValueError(f"buffer {buffer} ({buf.nbytes} bytes) has no room for {shape} {dtype}")
        buf.used = aligned(ref.offset + ref.nbytes)
        return ref

    def tensor(self, ref: TensorRef) -> torch.Tensor:
        return _view(self.buffers[ref.buffer].base, ref)

    def descriptors(self) -> tuple[list[dict], list[int]]:
        """What a runner needs to map the buffers: their descriptions and file descriptors, in order."""
        return ([{"id": b.id, "nbytes": b.nbytes, "writable": b.runner_writable, "device": self.device}
                 for b in self.buffers], [b.fd for b in self.buffers])

    def close(self) -> None:
        for b in self.buffers:
            b.base = None  # type: ignore[assignment]
            if isinstance(b.handle, mmap.mmap):
                b.handle.close()
            elif b.handle is not None:
                b.handle.release()  # type: ignore[attr-defined]
            os.close(b.fd)
        self.buffers.clear()


_REGISTERED_PAGES: list[mmap.mmap] = []  # one 4 KiB page per runner the judge started on a GPU


class FlagPage:
    """A host page of 32-bit words shared with a runner (memfd), registered for the GPU where there
    is one, each word set to the batch it belongs to (values only grow, so a stale word never matches):
    `ready` (the runner's stream: its context is resident and waiting), per call k of a batch
    `call_release(k)` (the judge: call k's late inputs are in) and `call_done(k)` (the runner's stream: call
    k ended), and `done` (the runner's stream: the batch ended)."""

    READY, DONE = 0, 128  # byte offsets, apart on separate cache lines
    MAX_CALLS = 16  # calls per batch the page has words for
    SIZE = 4096

    @staticmethod
    def call_release(k: int) -> int:
        return 1024 + 64 * k

    @staticmethod
    def call_done(k: int) -> int:
        return 2048 + 64 * k

    def __init__(self, device: str, ops=None):
        """`ops`: the device operations that register the page (gpu_ops.cuda_ops() on a GPU; the model in tests);
        the process must have its context first (gpu_model's register_needs_context)."""
        self.fd = os.memfd_create("evoteam-flags", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.SIZE)
        self.page = mmap.mmap(self.fd, self.SIZE)
        self.words = memoryview(self.page).cast("I")
        self.device_address = 0
        if ops is None and device.startswith("cuda"):
            from evoteam.harness.gpu_ops import cuda_ops

            ops = cuda_ops()
        if ops is not None:
            import ctypes

            address = ctypes.addressof(ctypes.c_char.from_buffer(self.page))
            self.device_address = ops.register_host(address, self.SIZE)

    def get(self, offset: int) -> int:
        return self.words[offset // 4]

    def set(self, offset: int, value: int) -> None:
        self.words[offset // 4] = value

    def close(self) -> None:
        self.words.release()
        if self.device_address:
            # A registered page stays mapped, and referenced, until the process ends: the GPU may still hold the
            # registration (a stream write queued for a runner that died). Unreferenced, its mmap would be freed,
            # the next page could land on the same addresses, and cuMemHostRegister would refuse them (CUDA error
            # 712, "already mapped") for every later runner of this judge: the likely cause of that error on the
            # H200 on 2026-12-02, after a runner restart.
            _REGISTERED_PAGES.append(self.page)
        else:
            self.page.close()
        os.close(self.fd)


# ------------------------------------------------------------------------------------------ runner side


class MappedBuffers:
    """The runner's mappings of the judge's buffers (read-only where the judge sealed them)."""

    def __init__(self, descriptors: list[dict], fds: list[int]):
        self.bases: dict[int, torch.Tensor] = {}
        self._keep: list[object] = []
        for desc, fd in zip(descriptors, fds):
            nbytes, device = int(desc["nbytes"]), str(desc["device"])
            if device.startswith("cuda"):
                from evoteam.harness import cudadrv

                index = torch.device(device).index or 0
                mapping = cudadrv.import_fd(fd, nbytes, index)
                self.bases[int(desc["id"])] = cudadrv.byte_tensor(mapping.ptr, mapping.size, index)
                self._keep.append(mapping)
            else:
                prot = mmap.PROT_READ | (mmap.PROT_WRITE if desc["writable"] else 0)
                mm = mmap.mmap(fd, nbytes, prot=prot)
                self._keep.append(mm)
                # A read-only mapping is handed over as such: a write through it faults.
                self.bases[int(desc["id"])] = torch.frombuffer(mm, dtype=torch.uint8) if desc["writable"] \
                    else _readonly_tensor(mm)
            os.close(fd)

    def tensor(self, ref: TensorRef) -> torch.Tensor:
        return _view(self.bases[ref.buffer], ref)

    def close(self) -> None:
        """Unmap everything (the caller has dropped every tensor made from these buffers)."""
        self.bases.clear()
        for handle in self._keep:
            if isinstance(handle, mmap.mmap):
                try:
                    handle.close()
                except BufferError:
                    pass  # a view still exists: the mapping goes with the process
            else:
                handle.release()  # type: ignore[attr-defined]
        self._keep.clear()


def _readonly_tensor(mm: mmap.mmap) -> torch.Tensor:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the buffer is not writable: that is the point
        return torch.frombuffer(mm, dtype=torch.uint8)
