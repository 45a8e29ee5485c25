"""MLA decode inputs with chosen request lengths (empty requests, block and chunk edges), and the
per-request comparison with the fp32 reference, shared by the kernel-family tests."""

import numpy as np
import torch

SM_SCALE = 0.1352337747812271  # the published workloads' sm_scale


def mla_inputs(lengths, seed, num_pages):
    """Random bf16 queries and caches; request b reads lengths[b] distinct random pages."""
    g = torch.Generator().manual_seed(seed)
    return {
        "q_nope": torch.randn(len(lengths), 16, 512, generator=g).to(torch.bfloat16),
        "q_pe": torch.randn(len(lengths), 16, 64, generator=g).to(torch.bfloat16),
        "ckv_cache": torch.randn(num_pages, 1, 512, generator=g).to(torch.bfloat16),
        "kpe_cache": torch.randn(num_pages, 1, 64, generator=g).to(torch.bfloat16),
        "kv_indptr": torch.tensor(np.concatenate(([0], np.cumsum(lengths))), dtype=torch.int32),
        "kv_indices": torch.randperm(num_pages, generator=g)[:sum(lengths)].to(torch.int32),
        "sm_scale": SM_SCALE,
    }


def assert_matches_reference(ref, lengths, output, lse):
    """Empty requests give output 0 and lse -inf; the others match the reference within bf16 bounds."""
    for b, n in enumerate(lengths):
        if n == 0:
            assert torch.all(output[b] == 0) and torch.all(torch.isneginf(lse[b])), b
        else:
            assert torch.allclose(lse[b], ref["lse"][b], atol=1e-4, rtol=1e-5), b
            err = (output[b].double() - ref["output"][b].double()).abs()
            assert torch.all(err <= 1e-2 + 1e-2 * ref["output"][b].double().abs()), b


def mla_family(name: str):
    """The MLA task's kernel family `name` (kernels/mla_decode/families.json)."""
    from evoteam.families import load_families

    return next(f for f in load_families("mla_decode") if f.name == name)


def family_module(name: str, params: dict, tmp_path, tag: str):
    """The MLA family `name`'s file at the point `params`, written under tmp_path and imported."""
    from evoteam.task import load_module_from_path

    path = tmp_path / f"{name}_{tag}.py"
    path.write_text(mla_family(name).source(params))
    return load_module_from_path(path, f"{name}_{tag}")
