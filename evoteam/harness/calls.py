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
from evoteam.harness.shared import Arena, TensorRef, _view, aligned

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
    """Every set has the same layout: set j's per-call inputs, late inputs and outputs sit at the same offsets in
    their buffers as set 0's, one block further on per set, so one operation covers a batch's every set (the poison,
    the check for unwritten outputs). The judge's own copy of the input buffer (`truth`) has the runner's layout too:
    a batch's fresh values are drawn once, into it, and copied across whole; the runner's inputs are checked against
    it with one comparison.

    The sets of a batch form a chain (the task's CHAINED_INPUTS): set j's chained input, for j >= 1, is set j-1's
    output, the same bytes of the output buffer (its slot in the input buffer stays unused). Poisoned before the
    batch, it holds call j-1's result only once that call has written it, so a call that computes another set ahead
    of the call it follows reads poison; the reference of set j is computed from what call j-1 wrote, and it is
    checked as call j-1's output, not as an input. Set 0's chained input is a fresh input like any other."""

    def __init__(self, task, workload, device: str, n_sets, budget_bytes: int = 4 << 30):
        """`n_sets`: how many sets at most, or a function of one set's inputs that says."""
        self.task, self.workload, self.device = task, workload, device
        self.is_cuda = device.startswith("cuda")
        gen = torch.Generator(device=device)
        gen.manual_seed(0)
        template = task.make_inputs(workload, gen, device)
        if callable(n_sets):
            n_sets = n_sets(template)
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
        # the chain: set j's chained input is set j-1's output (same shape and dtype: checked here, per workload)
        self.chain = {n: o for n, o in task.chained_inputs.items() if n in tensors and n not in shared
                      and n not in self.late} if n_sets > 1 else {}
        for name, output in self.chain.items():
            if tuple(tensors[name].shape) != out_specs[output][0] or tensors[name].dtype != out_specs[output][1]:
                raise ValueError(f"task {task.name}, workload {workload.uuid}: chained input {name} "
                                 f"{tuple(tensors[name].shape)} {tensors[name].dtype} is not shaped as output "
                                 f"{output} {out_specs[output][0]} {out_specs[output][1]}")
            for j in range(1, n_sets):
                self.refs[j]["inputs"][name] = self.refs[j - 1]["outputs"][output]
        self.out_buf, self.late_buf = out_buf, late_buf
        buffers = self.arena.buffers
        self.in_base, self.out_base = buffers[in_buf].base, buffers[out_buf].base
        self.late_base = buffers[late_buf].base if late_buf is not None else None
        # where set j's block ends in each buffer (blocks are uniform: set j's starts one block after set j-1's)
        self.shared_end, self.in_block, self.out_block = size(shared), size(per_call), out_bytes
        self.late_block = size(self.late)
        self.set_end = [max(r.offset + r.nbytes for r in ref["outputs"].values()) for ref in self.refs]
        # each set's late inputs lie together in the late buffer: released call by call
        self.late_span = [(j * self.late_block, (j + 1) * self.late_block) if self.late else (0, 0)
                          for j in range(n_sets)]
        # The judge's views of the shared buffers, and its own copies (never shared): `truth` mirrors the input
        # buffer byte for byte, `late_truth` holds the late inputs' true values (the runner sees decoys until the
        # clock starts).
        self.inputs = [{**{n: self.arena.tensor(r) for n, r in ref["inputs"].items()}, **self.scalars}
                       for ref in self.refs]
        self.outputs = [{n: self.arena.tensor(r) for n, r in ref["outputs"].items()} for ref in self.refs]
        self.truth = torch.zeros(buffers[in_buf].used, dtype=torch.uint8, device=device)
        late_bytes = buffers[late_buf].nbytes if late_buf is not None else 0
        self.late_truth = torch.empty(late_bytes, dtype=torch.uint8, device=device)
        self.staging = torch.empty(late_bytes, dtype=torch.uint8, pin_memory=self.is_cuda) if self.is_cuda \
            else self.late_truth
        self.pristine = []
        for j, ref in enumerate(self.refs):
            # what the reference is computed from: the judge's own copies; a chained input (j >= 1) is the previous
            # call's output as it was written, read where the runner wrote it
            own = {n: (_view(self.out_base, r) if j and n in self.chain
                       else _view(self.late_truth if n in self.late else self.truth, r))
                   for n, r in ref["inputs"].items()}
            self.pristine.append({**own, **self.scalars})
        for j, own in enumerate(self.pristine):  # start equal everywhere (a shared input is one tensor)
            for n, value in tensors.items():
                if j == 0 or (n not in shared and n not in self.chain):
                    own[n].copy_(value)
        self.in_base[:self.truth.numel()].copy_(self.truth)
        if self.late:
            self.late_base.copy_(self.late_truth)
        # the poison, laid out as the output buffer: a batch's outputs are poisoned with one copy
        self.poison_image = torch.zeros(buffers[out_buf].used, dtype=torch.uint8, device=device)
        for ref in self.refs:
            for r in ref["outputs"].values():
                out = _view(self.poison_image, r)
                _bits_view(out).fill_(_poison_value(out.dtype))
        # per output: its every set as one strided view of its bits (set j at row j), for the check of unwritten ones
        self.output_rows = {n: (_stacked(_bits_view(self.outputs[0][n]), n_sets, self.out_block).reshape(n_sets, -1),
                                _poison_value(self.outputs[0][n].dtype)) for n in self.outputs[0]}
        # per late input: its every set as one view (set j at index j), where the decoys go
        self.late_rows = {n: _stacked(self.inputs[0][n], n_sets, self.late_block) for n in self.late}
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

    def _in_end(self, sets: list[int]) -> int:
        return self.shared_end + (max(sets) + 1) * self.in_block

    # ------------------------------------------------------------------ before a batch
    def refresh(self, sets: list[int], seed: int) -> None:
        """Fresh values for `sets`, drawn once into the judge's copies and copied whole into the runner's input
        buffer (the late inputs only into the judge's: decoys go where the runner sees them)."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        self.task.refresh_inputs(self.workload, [self.pristine[j] for j in sets], gen)
        end = self._in_end(sets)
        self.in_base[:end].copy_(self.truth[:end])
        if self.late:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed ^ 0x5DEECE66D)
            # the batch's sets at once: each late input as one tensor with a leading axis of sets
            lo, hi = min(sets), max(sets) + 1
            stacked = {**self.inputs[lo], **{n: rows[lo:hi] for n, rows in self.late_rows.items()}}
            self.task.decoy_inputs(self.workload, stacked, self.late, gen)
            if self.is_cuda:
                self.staging.copy_(self.late_truth, non_blocking=True)
        self.poison(sets)

    def poison(self, sets: list[int]) -> None:
        lo, hi = min(sets) * self.out_block, (max(sets) + 1) * self.out_block
        self.out_base[lo:hi].copy_(self.poison_image[lo:hi])

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
        sample = self.plan_sample(sets)
        self.read_sample(sample, stream)
        return sample

    def plan_sample(self, sets: int) -> Sample:
        """Where the sample of the first `sets` sets' outputs is taken (a secret offset, every `pitch` bytes)."""
        region = self.set_end[sets - 1]
        rng = random.SystemRandom()
        pitch = max(SAMPLE_WIDTH, (region // SAMPLE_ROWS) // SAMPLE_WIDTH * SAMPLE_WIDTH)
        offset = rng.randrange(0, max(1, min(pitch, region) - SAMPLE_WIDTH + 1))
        rows = max(0, min(SAMPLE_ROWS, (region - offset) // pitch if pitch else 0))
        return Sample(offset, pitch, rows, self.sample_host[0], self.sample_host[1])

    def read_sample(self, sample: Sample, stream: int | None = None) -> None:
        """The sample's copy (GPU: enqueued on the copy engine of `stream`)."""
        self._read(sample, sample.host, stream)

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
        lo, hi = min(sets), max(sets) + 1
        hits = [(rows[lo:hi] == poison).any() for rows, poison in self.output_rows.values()]
        if not bool(torch.stack(hits).any()):  # one synchronisation for the batch; the detail only on a finding
            return None
        for j in sets:
            for name, out in self.outputs[j].items():
                bits = _bits_view(out)
                hits = bits == _poison_value(out.dtype)
                if bool(hits.any()):
                    count = int(hits.sum())
                    return f"{name}: {count} of {out.numel()} elements never written (call {j} of the batch)"
        return None

    def verify(self, j: int, trial: int, elementwise_factor: float = 1.0, fib: bool = False):
        """Every output element of set j against the reference computed from the judge's copy (`fib`: by
        flashinfer-bench's rule). A chained input (call j-1's output) that is not finite fails set j: a reference
        computed from NaN gives NaN, which an output computed from the poison (a call that ran ahead of the one it
        follows) would equal."""
        if j and self.chain:
            from evoteam.harness.check import CheckFailure

            for name, output in self.chain.items():
                if not bool(torch.isfinite(self.pristine[j][name]).all()):
                    return CheckFailure("nan_inf", name, trial, None, 0,
                                        f"{name} of call {j} of the batch (call {j - 1}'s {output}) is not finite"), {}
        reference = self.task.reference(self.pristine[j])
        return compare_with_reference(self.task, self.outputs[j], reference, trial, elementwise_factor, fib)

    def inputs_unchanged(self, sets: list[int], trial: int):
        end = self._in_end(sets)
        same = torch.equal(self.in_base[:end], self.truth[:end])
        if same and self.late:
            lo, hi = self.late_span[min(sets)][0], self.late_span[max(sets)][1]
            same = torch.equal(self.late_base[lo:hi], self.late_truth[lo:hi])
        if same:
            return None
        shared_done = False
        for j in sets:
            now = {n: v for n, v in self.inputs[j].items() if isinstance(v, torch.Tensor)
                   and (n not in self.task.shared_inputs or not shared_done)}
            given = {n: self.pristine[j][n] for n in now}
            failure = compare_inputs(now, given, trial)
            shared_done = True
            if failure is not None:
                return failure
        from evoteam.harness.check import CheckFailure

        return CheckFailure("input_modified", "", trial, None, 0, "the input buffer changed between its tensors")

    def close(self) -> None:
        self.arena.close()


def _stacked(first: torch.Tensor, n_sets: int, block: int) -> torch.Tensor:
    """Set 0's tensor and its n_sets - 1 successors, one block of bytes apart, as one tensor [n_sets, *shape]."""
    return first.as_strided((n_sets, *first.shape), (block // first.element_size(), *first.stride()))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
