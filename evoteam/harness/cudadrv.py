"""The few CUDA driver calls the harness needs that PyTorch does not expose, through ctypes.

- Device memory that another process can map whatever its namespaces: the virtual memory
  management API with POSIX file-descriptor handles (`cuMemCreate`, `cuMemExportToShareableHandle`,
  `cuMemImportFromShareableHandle`, `cuMemMap`). The legacy CUDA IPC handles that torch uses refuse
  processes in another PID namespace, and the sandboxed runner lives in one.
- Stream memory operations (`cuStreamWaitValue32`, `cuStreamWriteValue32`): one stream waits, on the
  GPU, for a 32-bit word that another context writes. The judge and the runner order their work
  with them without any host round trip inside the timed interval.

Everything works on the calling thread's current context (PyTorch's primary context, made current
by `ensure_context`).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
CU_STREAM_WAIT_VALUE_GEQ = 0
CU_STREAM_WRITE_VALUE_DEFAULT = 0  # with a memory fence before the write: earlier writes are visible first


class CudaDriverError(RuntimeError):
    pass


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


@cache
def _lib() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise CudaDriverError(f"the CUDA driver library does not load: {exc}") from None


def _fn(*names: str):
    lib = _lib()
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            return fn
    raise CudaDriverError(f"the CUDA driver has none of {', '.join(names)}")


def _check(result: int, what: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        _fn("cuGetErrorString")(result, ctypes.byref(text))
        message = text.value.decode() if text.value else "unknown error"
        raise CudaDriverError(f"{what} failed: CUDA error {result} ({message})")


def ensure_context(device: int) -> None:
    """Make the device's primary context (the one PyTorch uses) current on this thread."""
    current = ctypes.c_void_p()
    _check(_fn("cuCtxGetCurrent")(ctypes.byref(current)), "cuCtxGetCurrent")
    if current.value:
        return
    _check(_fn("cuInit")(0), "cuInit")
    ctx = ctypes.c_void_p()
    _check(_fn("cuDevicePrimaryCtxRetain")(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
    _check(_fn("cuCtxSetCurrent")(ctx), "cuCtxSetCurrent")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, device)
    return prop


def granularity(device: int) -> int:
    size = ctypes.c_size_t()
    prop = _prop(device)
    _check(_fn("cuMemGetAllocationGranularity")(ctypes.byref(size), ctypes.byref(prop),
                                                 CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
           "cuMemGetAllocationGranularity")
    return size.value


@dataclass
class Mapping:
    """A physical allocation mapped at `ptr` in this process (`size` bytes, granularity-rounded)."""

    ptr: int
    size: int
    handle: int
    device: int

    def release(self) -> None:
        if not self.ptr:
            return
        _check(_fn("cuMemUnmap")(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size)), "cuMemUnmap")
        _check(_fn("cuMemAddressFree")(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size)), "cuMemAddressFree")
        _check(_fn("cuMemRelease")(ctypes.c_uint64(self.handle)), "cuMemRelease")
        self.ptr = 0


def _map(handle: int, size: int, device: int) -> Mapping:
    ptr = ctypes.c_uint64()
    _check(_fn("cuMemAddressReserve")(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                      ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
    _check(_fn("cuMemMap")(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                           ctypes.c_uint64(0)), "cuMemMap")
    access = _AccessDesc(_Location(CU_MEM_LOCATION_TYPE_DEVICE, device), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    _check(_fn("cuMemSetAccess")(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
           "cuMemSetAccess")
    return Mapping(ptr=ptr.value, size=size, handle=handle, device=device)


def allocate(nbytes: int, device: int) -> Mapping:
    """Device memory of at least `nbytes`, mapped here and exportable as a file descriptor."""
    gran = granularity(device)
    size = max(gran, -(-nbytes // gran) * gran)
    handle = ctypes.c_uint64()
    prop = _prop(device)
    _check(_fn("cuMemCreate")(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0)),
           f"cuMemCreate({size} bytes)")
    try:
        return _map(handle.value, size, device)
    except CudaDriverError:
        _fn("cuMemRelease")(handle)
        raise


def export_fd(mapping: Mapping) -> int:
    """A new file descriptor for the allocation; the receiving process imports it with `import_fd`."""
    fd = ctypes.c_int(-1)
    _check(_fn("cuMemExportToShareableHandle")(ctypes.byref(fd), ctypes.c_uint64(mapping.handle),
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, ctypes.c_uint64(0)),
           "cuMemExportToShareableHandle")
    return fd.value


def import_fd(fd: int, size: int, device: int) -> Mapping:
    handle = ctypes.c_uint64()
    _check(_fn("cuMemImportFromShareableHandle")(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
           "cuMemImportFromShareableHandle")
    try:
        return _map(handle.value, size, device)
    except CudaDriverError:
        _fn("cuMemRelease")(handle)
        raise


def stream_wait_value(stream: int, address: int, value: int) -> None:
    """Enqueue on `stream`: wait until the 32-bit word at `address` is >= `value` (GPU-side)."""
    _check(_fn("cuStreamWaitValue32_v2", "cuStreamWaitValue32")(
        ctypes.c_void_p(stream), ctypes.c_uint64(address), ctypes.c_uint32(value),
        ctypes.c_uint(CU_STREAM_WAIT_VALUE_GEQ)), "cuStreamWaitValue32")


def stream_write_value(stream: int, address: int, value: int) -> None:
    """Enqueue on `stream`: write `value` to the 32-bit word at `address`, after a memory fence."""
    _check(_fn("cuStreamWriteValue32_v2", "cuStreamWriteValue32")(
        ctypes.c_void_p(stream), ctypes.c_uint64(address), ctypes.c_uint32(value),
        ctypes.c_uint(CU_STREAM_WRITE_VALUE_DEFAULT)), "cuStreamWriteValue32")


def graph_upload(graph_exec: int, stream: int) -> None:
    """Enqueue on `stream` the upload of an instantiated graph, without running it (a launch of a graph not yet
    uploaded uploads it first, ordered behind what the stream waits on)."""
    _check(_fn("cuGraphUpload")(ctypes.c_void_p(graph_exec), ctypes.c_void_p(stream)), "cuGraphUpload")


class _ArrayInterface:
    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


def byte_tensor(ptr: int, nbytes: int, device: int):
    """A uint8 torch tensor over `nbytes` of device memory at `ptr` (no copy; the caller keeps the
    mapping alive as long as the tensor)."""
    import torch

    return torch.as_tensor(_ArrayInterface(ptr, nbytes), device=f"cuda:{device}")


CU_MEMHOSTREGISTER_PORTABLE = 1
CU_MEMHOSTREGISTER_DEVICEMAP = 2


def register_host(address: int, nbytes: int) -> int:
    """Page-locks host memory (e.g. a shared mmap) and maps it for the device; its device address."""
    _check(_fn("cuMemHostRegister_v2", "cuMemHostRegister")(
        ctypes.c_void_p(address), ctypes.c_size_t(nbytes),
        ctypes.c_uint(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)), "cuMemHostRegister")
    dptr = ctypes.c_uint64()
    _check(_fn("cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer")(
        ctypes.byref(dptr), ctypes.c_void_p(address), ctypes.c_uint(0)), "cuMemHostGetDevicePointer")
    return dptr.value


class _Memcpy2D(ctypes.Structure):
    _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int),
                ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
                ("srcPitch", ctypes.c_size_t),
                ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstMemoryType", ctypes.c_int),
                ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
                ("dstPitch", ctypes.c_size_t),
                ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t)]


CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE = 1, 2


def copy_strided_to_host(stream: int, src: int, pitch: int, width: int, height: int, dst_host: int) -> None:
    """Enqueue a copy engine transfer of `height` rows of `width` bytes, `pitch` bytes apart, from
    device address `src` into contiguous (page-locked) host memory: a sample of a buffer that takes
    no multiprocessor time, so it does not displace the context that owns them."""
    desc = _Memcpy2D()
    desc.srcMemoryType, desc.srcDevice, desc.srcPitch = CU_MEMORYTYPE_DEVICE, src, pitch
    desc.dstMemoryType, desc.dstHost, desc.dstPitch = CU_MEMORYTYPE_HOST, dst_host, width
    desc.WidthInBytes, desc.Height = width, height
    _check(_fn("cuMemcpy2DAsync_v2", "cuMemcpy2DAsync")(ctypes.byref(desc), ctypes.c_void_p(stream)),
           "cuMemcpy2DAsync")


class _KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_GRAPH = 0, 1


def graph_node_count(graph: int) -> int:
    """The nodes of a CUDA graph (its top level: a child graph counts as one)."""
    count = ctypes.c_size_t()
    _check(_fn("cuGraphGetNodes")(ctypes.c_void_p(graph), None, ctypes.byref(count)), "cuGraphGetNodes")
    return int(count.value)


def graph_kernel_names(graph: int) -> list[str]:
    """The (mangled) names of the kernels a CUDA graph launches, read from its nodes (child graphs included): what
    a profiler would list for its replay, without one (the profiler's start cost seconds)."""
    count = ctypes.c_size_t()
    _check(_fn("cuGraphGetNodes")(ctypes.c_void_p(graph), None, ctypes.byref(count)), "cuGraphGetNodes")
    nodes = (ctypes.c_void_p * max(1, count.value))()
    _check(_fn("cuGraphGetNodes")(ctypes.c_void_p(graph), nodes, ctypes.byref(count)), "cuGraphGetNodes")
    names: list[str] = []
    for node in nodes[:count.value]:
        kind = ctypes.c_int()
        _check(_fn("cuGraphNodeGetType")(ctypes.c_void_p(node), ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value == CU_GRAPH_NODE_TYPE_GRAPH:
            child = ctypes.c_void_p()
            _check(_fn("cuGraphChildGraphNodeGetGraph")(ctypes.c_void_p(node), ctypes.byref(child)),
                   "cuGraphChildGraphNodeGetGraph")
            names += graph_kernel_names(child.value or 0)
            continue
        if kind.value != CU_GRAPH_NODE_TYPE_KERNEL:
            continue
        params = _KernelNodeParams()
        _check(_fn("cuGraphKernelNodeGetParams_v2", "cuGraphKernelNodeGetParams")(
            ctypes.c_void_p(node), ctypes.byref(params)), "cuGraphKernelNodeGetParams")
        name = ctypes.c_char_p()
        if params.func:
            _check(_fn("cuFuncGetName")(ctypes.byref(name), ctypes.c_void_p(params.func)), "cuFuncGetName")
        elif params.kern:
            _check(_fn("cuKernelGetName")(ctypes.byref(name), ctypes.c_void_p(params.kern)), "cuKernelGetName")
        names.append(name.value.decode(errors="replace") if name.value else "?")
    return names
