"""The inputs and outputs of one side's calls on one workload: buffers a runner maps, the judge's own
copies, fresh values for every batch, the poison, the late inputs and the sample of the outputs.

A batch is up to `n_sets` calls, each on its own input set (shared inputs, such as a KV-cache pool,
are one buffer for all). Before a batch the judge draws fresh values, with a generator seeded by its
secret, twice: into the buffers the runner maps and into copies only the judge holds, which it later
compares the runner's buffers with and computes the reference from. Late inputs (the task's
LATE_INPUTS) hold decoys until the clock starts; then the judge copies the true values in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from evoteam.harness.check import _bits_view, _poison_value, compare_inputs, compare_with_reference
from evoteam.harness.shared import Arena, TensorRef, aligned

SAMPLE_WIDTH = 16  # bytes per sampled row
SAMPLE_ROWS = 4096  # sampled rows per batch (64 KiB): an output region is sampled every region/4096 bytes
LATE_DEFAULT_BYTES = 1 << 20  # without a declaration, inputs this small (per call) are late


def choose_late(task, template: dict[str, Any]) -> tuple[str, ...]:
    """The task's LATE_INPUTS; otherwise every per-call tensor input if they are small together, else
    the smallest one (it is not known which one every output depends on: a task should say)."""
    declared = task.declared_late_inputs
    if declared is not None:
        return declared
    per_call = {n: v for n, v in template.items() if isinstance(v, torch.Tensor) and n not in task.shared_inputs}
    if not per_call:
        return ()
    if sum(v.numel() * v.element_size() for v in per_call.values()) <= LATE_DEFAULT_BYTES:
        return tuple(per_call)
    return (min(per_call, key=lambda n: per_call[n].numel() * per_call[n].element_size()),)


@dataclass
class Sample:
    offset: int
    pitch: int
    rows: int
    host: torch.Tensor  # what the outputs held at the end mark
    again: torch.Tensor  # where the judge reads them once more, after the batch


class CallSets:
    def __init__(self, task, workload, device: str, n_sets: int, budget_bytes: int = 4 << 30):
        self.task, self.workload, self.device = task, workload, device
        self.is_cuda = device.startswith("cuda")
        gen = torch.Generator(device=device)
        gen.manual_seed(0)
        template = task.make_inputs(workload, gen, device)
        self.scalars = {n: v for n, v in template.items() if not isinstance(v, torch.Tensor)}
        tensors = {n: v for n, v in template.items() if isinstance(v, torch.Tensor)}
        shapes = task.output_shapes(workload, template)
        from evoteam.harness.check import torch_dtype

        out_specs = {n: (tuple(shapes[n]), torch_dtype(s.dtype)) for n, s in task.definition.outputs.items()}
        self.late = tuple(n for n in choose_late(task, template) if n in tensors)
        shared = tuple(n for n in task.shared_inputs if n in tensors)
        per_call = [n for n in tensors if n not in shared and n not in self.late]

        def size(names) -> int:
            return sum(aligned(tensors[n].numel() * tensors[n].element_size()) for n in names)

        out_bytes = sum(aligned(torch.empty((), dtype=d).element_size() * _numel(s)) for s, d in out_specs.values())
        per_set = size(per_call) + size(self.late) + out_bytes
        n_sets = max(1, min(n_sets, budget_bytes // max(1, 2 * per_set)))  # the runner's copy and the judge's
        self.n_sets = n_sets
        self.arena = Arena(device)
        in_buf = self.arena.buffer(size(shared) + n_sets * size(per_call), runner_writable=False)
        late_buf = self.arena.buffer(n_sets * size(self.late), runner_writable=False) if self.late else None
        out_buf = self.arena.buffer(n_sets * out_bytes, runner_writable=True)
        shared_refs = {n: self.arena.place(in_buf, tensors[n].shape, tensors[n].dtype) for n in shared}
        self.refs: list[dict[str, dict[str, TensorRef]]] = []
        for _ in range(n_sets):
            inputs = dict(shared_refs)
            for n in per_call:
                inputs[n] = self.arena.place(in_buf, tensors[n].shape, tensors[n].dtype)
            for n in self.late:
                inputs[n] = self.arena.place(late_buf, tensors[n].shape, tensors[n].dtype)
            outputs = {n: self.arena.place(out_buf, s, d) for n, (s, d) in out_specs.items()}
            self.refs.append({"inputs": inputs, "outputs": outputs})
        self.out_buf, self.late_buf = out_buf, late_buf
        self.set_end = [max(r.offset + r.nbytes for r in ref["outputs"].values()) for ref in self.refs]
        # each set's late inputs lie together in the late buffer: released call by call
        self.late_span = [(min(ref["inputs"][n].offset for n in self.late),
                           max(ref["inputs"][n].offset + ref["inputs"][n].nbytes for n in self.late))
                          if self.late else (0, 0) for ref in self.refs]
        # The judge's views of the shared buffers, and its own copies (never shared).
        self.inputs = [{**{n: self.arena.tensor(r) for n, r in ref["inputs"].items()}, **self.scalars}
                       for ref in self.refs]
        self.outputs = [{n: self.arena.tensor(r) for n, r in ref["outputs"].items()} for ref in self.refs]
        late_bytes = self.arena.buffers[late_buf].nbytes if late_buf is not None else 0
        self.late_truth = torch.empty(late_bytes, dtype=torch.uint8, device=device)
        self.staging = torch.empty(late_bytes, dtype=torch.uint8, pin_memory=self.is_cuda) if self.is_cuda \
            else self.late_truth
        pristine_shared = {n: torch.empty_like(tensors[n]) for n in shared}
        self.pristine = []
        for ref in self.refs:
            own = dict(pristine_shared)
            for n in per_call:
                own[n] = torch.empty_like(tensors[n])
            for n in self.late:
                r = ref["inputs"][n]
                own[n] = self.late_truth[r.offset:r.offset + r.nbytes].view(tensors[n].dtype).view(tensors[n].shape)
            self.pristine.append({**own, **self.scalars})
        # Refreshing this view writes what the runner sees, but the late inputs' truth into the judge's copy.
        self._shared_view = [{**inputs, **{n: p[n] for n in self.late}} for inputs, p in zip(self.inputs, self.pristine)]
        for inputs, own in zip(self.inputs, self.pristine):  # start equal everywhere (refreshes touch only what calls read)
            for n, value in tensors.items():
                inputs[n].copy_(value)
                own[n].copy_(value)
        self.sample_host = [torch.empty(SAMPLE_ROWS * SAMPLE_WIDTH, dtype=torch.uint8, pin_memory=self.is_cuda)
                            for _ in range(2)]

    # ------------------------------------------------------------------ what the runner is given
    def bind_message(self) -> tuple[dict, list[int]]:
        descriptors, fds = self.arena.descriptors()
        sets = []
        for ref in self.refs:  # in the definition's order: a Solution is called positionally
            inputs = {**{n: r.to_json() for n, r in ref["inputs"].items()},
                      **{n: {"value": v} for n, v in self.scalars.items()}}
            sets.append({"inputs": {n: inputs[n] for n in self.task.definition.inputs},
                         "outputs": {n: ref["outputs"][n].to_json() for n in self.task.definition.outputs}})
        return {"op": "bind", "buffers": descriptors, "sets": sets, "workload": self.workload.to_json()}, fds

    # ------------------------------------------------------------------ before a batch
    def refresh(self, sets: list[int], seed: int) -> None:
        """Fresh values for `sets` (in the runner's buffers and in the judge's copies, the late
        inputs only in the judge's), then decoys where the late inputs go."""
        for target in (self.pristine, self._shared_view):
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed)
            self.task.refresh_inputs(self.workload, [target[j] for j in sets], gen)
        if self.late:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed ^ 0x5DEECE66D)
            for j in sets:
                self.task.decoy_inputs(self.workload, self.inputs[j], self.late, gen)
            if self.is_cuda:
                self.staging.copy_(self.late_truth, non_blocking=True)
        self.poison(sets)

    def poison(self, sets: list[int]) -> None:
        for j in sets:
            for out in self.outputs[j].values():
                _bits_view(out).fill_(_poison_value(out.dtype))

    # ------------------------------------------------------------------ at the start mark
    def release_late(self, j: int | None = None, stream=None) -> None:
        """Copy the late inputs' true values in, of set `j` (every set's if None): a copy-engine transfer on the
        GPU's `stream` (default: the current one; it does not take the GPU from the runner's context), a memory
        copy on a CPU."""
        if self.late_buf is None:
            return
        lo, hi = (0, self.staging.numel()) if j is None else self.late_span[j]
        target = self.arena.buffers[self.late_buf].base[lo:hi]
        if self.is_cuda and stream is not None:
            with torch.cuda.stream(stream):
                target.copy_(self.staging[lo:hi], non_blocking=True)
        else:
            target.copy_(self.staging[lo:hi], non_blocking=self.is_cuda)

    # ------------------------------------------------------------------ at the end mark
    def take_sample(self, sets: int, stream: int | None = None) -> Sample:
        """A copy of the output bytes every `pitch` bytes of the first `sets` sets' outputs, from a secret
        offset: the outputs of a whole batch at its end (GPU: enqueued on the copy engine of `stream`)."""
        region = self.set_end[sets - 1]
        rng = random.SystemRandom()
        pitch = max(SAMPLE_WIDTH, (region // SAMPLE_ROWS) // SAMPLE_WIDTH * SAMPLE_WIDTH)
        offset = rng.randrange(0, max(1, min(pitch, region) - SAMPLE_WIDTH + 1))
        rows = max(0, min(SAMPLE_ROWS, (region - offset) // pitch if pitch else 0))
        sample = Sample(offset, pitch, rows, self.sample_host[0], self.sample_host[1])
        self._read(sample, sample.host, stream)
        return sample

    def _read(self, sample: Sample, host: torch.Tensor, stream: int | None) -> None:
        if sample.rows == 0:
            return
        base = self.arena.buffers[self.out_buf].base
        if self.is_cuda:
            from evoteam.harness import cudadrv

            cudadrv.copy_strided_to_host(stream, base.data_ptr() + sample.offset, sample.pitch, SAMPLE_WIDTH,
                                         sample.rows, host.data_ptr())
        else:
            span = base[sample.offset:sample.offset + sample.rows * sample.pitch].view(sample.rows, sample.pitch)
            host[:sample.rows * SAMPLE_WIDTH].view(sample.rows, SAMPLE_WIDTH).copy_(span[:, :SAMPLE_WIDTH])

    def changed_since(self, sample: Sample) -> bool:
        """Whether the outputs differ from the sample taken at the end mark (written after it)."""
        self._read(sample, sample.again, torch.cuda.current_stream().cuda_stream if self.is_cuda else None)
        if self.is_cuda:
            torch.cuda.current_stream().synchronize()
        n = sample.rows * SAMPLE_WIDTH
        return not torch.equal(sample.host[:n], sample.again[:n])

    # ------------------------------------------------------------------ after a batch
    def unwritten(self, sets: list[int]) -> str | None:
        for j in sets:
            for name, out in self.outputs[j].items():
                bits = _bits_view(out)
                hits = bits == _poison_value(out.dtype)
                if bool(hits.any()):
                    count = int(hits.sum())
                    return f"{name}: {count} of {out.numel()} elements never written (call {j} of the batch)"
        return None

    def verify(self, j: int, trial: int, elementwise_factor: float = 1.0):
        """Every output element of set j against the reference computed from the judge's copy."""
        reference = self.task.reference(self.pristine[j])
        return compare_with_reference(self.task, self.outputs[j], reference, trial, elementwise_factor)

    def inputs_unchanged(self, sets: list[int], trial: int):
        shared_done = False
        for j in sets:
            now = {n: v for n, v in self.inputs[j].items() if isinstance(v, torch.Tensor)
                   and (n not in self.task.shared_inputs or not shared_done)}
            given = {n: self.pristine[j][n] for n in now}
            failure = compare_inputs(now, given, trial)
            shared_done = True
            if failure is not None:
                return failure
        return None

    def close(self) -> None:
        self.arena.close()


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
