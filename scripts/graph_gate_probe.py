"""Does launching a CUDA graph onto a stream that waits on a word (the runner's graph batch: cuStreamWaitValue32 on
its release word, then the replay) return at once, or does the host block until the word is written?

On the H200 (2026-12-05) an honest PyTorch candidate and a value-returning wrapper timed out in the runner's `arm`
(graph batch) while Triton-only kernels did not; their graphs hold many more nodes (about 25 a call, up to 128 calls a
batch), memcpy/memset nodes and private-pool allocations. The suspicion: a graph not yet uploaded is submitted node by
node at its first launch, the stream's queue fills behind the unwritten word, and the host blocks.
Each graph kind below is replayed twice behind an unwritten word that a timer thread writes after GATE_S: a replay
that takes about GATE_S on the host blocked on the gate. Variants: the first replay after instantiate, a graph
uploaded first (cuGraphUpload), and a graph replayed once ungated first.

Usage on a GPU host, from the repository root: python3 scripts/graph_gate_probe.py
"""

import os
import threading
import time

import torch

from evoteam.harness import cudadrv
from evoteam.harness.shared import FlagPage

GATE_S = float(os.environ.get("GATE_S", "3"))  # seconds the word stays unwritten


def main() -> None:
    dev = "cuda:0"
    torch.ones(1, device=dev)
    flags = FlagPage(dev)
    stream = torch.cuda.Stream()
    torch.cuda.set_stream(stream)
    x = torch.randn(1 << 20, device=dev)
    y = torch.empty_like(x)
    kinds = {
        "kernel": lambda: torch.mul(x, 2, out=y),
        "memset": lambda: y.zero_(),
        "memcpy": lambda: y.copy_(x),
        "alloc+memcpy": lambda: y.copy_(x * 2),
        # an honest PyTorch candidate's batch: ~25 kernels and copies a call, up to 128 calls a batch
        "kernels x3000": lambda: [torch.add(x, 1, out=y) for _ in range(3000)],
        "allocs x3000": lambda: [y.copy_(x + 1) for _ in range(1500)],
    }
    release = FlagPage.call_release(0)
    value = 0
    for variant in ("first", "uploaded", "warm"):
        for name, fn in kinds.items():
            side = torch.cuda.Stream()
            side.wait_stream(stream)
            with torch.cuda.stream(side):
                fn()
            stream.wait_stream(side)
            torch.cuda.synchronize()
            try:
                graph = torch.cuda.CUDAGraph(keep_graph=True)
            except TypeError:
                graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            torch.cuda.synchronize()
            if hasattr(graph, "instantiate"):
                graph.instantiate()
            if variant == "uploaded":
                try:  # as the runner does (runner.op_capture); torch without raw_cuda_graph_exec: not uploaded
                    cudadrv.graph_upload(graph.raw_cuda_graph_exec(), stream.cuda_stream)
                except (AttributeError, cudadrv.CudaDriverError) as exc:
                    print(f"{variant:9s} {name:13s} not uploaded: {exc}", flush=True)
                torch.cuda.synchronize()
            elif variant == "warm":
                graph.replay()
                torch.cuda.synchronize()
            times = []
            for _ in range(2):
                value += 1
                cudadrv.stream_wait_value(stream.cuda_stream, flags.device_address + release, value)
                timer = threading.Timer(GATE_S, lambda v=value: flags.words.__setitem__(release // 4, v))
                timer.start()
                t = time.perf_counter()
                graph.replay()
                times.append(time.perf_counter() - t)
                timer.join()
                torch.cuda.synchronize()
            verdict = "BLOCKS" if max(times) > GATE_S / 2 else "returns at once"
            print(f"{variant:9s} {name:13s} replay host s: {times[0]:.3f}, {times[1]:.3f}  {verdict}", flush=True)


if __name__ == "__main__":
    main()
