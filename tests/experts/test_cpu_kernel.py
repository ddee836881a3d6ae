"""The native CPU expert kernel (cpu_moe.c) against torch's per-expert path: same pairs, same sums;
float32 to rounding, bfloat16 to bf16 tolerance; odd sizes exercise the vector tails and chunking."""

from __future__ import annotations

import pytest
import torch

from strata.config import ExpertConfig
from strata.experts import cpu_kernel
from strata.experts.cpu_pool import CpuExpertPool

pytestmark = pytest.mark.skipif(cpu_kernel.load() is None, reason="no C compiler to build the native kernel")


def _case(dtype: torch.dtype, num_experts: int, dim: int, inter: int, rows: int, pairs: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(num_experts, 2 * inter, dim, generator=gen) * dim ** -0.5).to(dtype)
    w2 = (torch.randn(num_experts, dim, inter, generator=gen) * inter ** -0.5).to(dtype)
    hidden = torch.randn(rows, dim, generator=gen).to(dtype)
    pair_rows = torch.randint(0, rows, (pairs,), generator=gen)
    experts = torch.randint(0, num_experts, (pairs,), generator=gen)
    weights = torch.rand(pairs, generator=gen).to(dtype)
    return hidden, pair_rows, experts, weights, (w13, w2)


@pytest.mark.parametrize("dim,inter,rows,pairs", [(64, 32, 1, 4), (100, 70, 5, 13), (256, 96, 9, 40)])
def test_native_matches_torch_float32(dim, inter, rows, pairs):
    case = _case(torch.float32, 12, dim, inter, rows, pairs, seed=dim)
    native = CpuExpertPool(2, "native").compute(*case)
    reference = CpuExpertPool(2, "torch").compute(*case)
    assert native.shape == reference.shape == (rows, dim) and native.dtype == torch.float32
    torch.testing.assert_close(native, reference, rtol=1e-5, atol=1e-5)


def test_native_matches_torch_bfloat16():
    case = _case(torch.bfloat16, 16, 2048 // 8, 768 // 8, 3, 24, seed=1)
    native = CpuExpertPool(3, "native").compute(*case)
    reference = CpuExpertPool(3, "torch").compute(*case)
    scale = reference.abs().max().item()
    assert (native - reference).abs().max().item() < 0.02 * scale
    assert torch.count_nonzero(native) == torch.count_nonzero(reference)  # the same rows got pairs


def test_rows_without_pairs_stay_zero_and_each_pair_counts():
    hidden, _, _, _, expert_weights = _case(torch.float32, 4, 64, 32, 3, 1, seed=3)
    rows, experts, weights = torch.tensor([0, 0, 2]), torch.tensor([1, 1, 3]), torch.tensor([0.5, 0.25, 1.0])
    out = CpuExpertPool(2, "native").compute(hidden, rows, experts, weights, expert_weights)
    assert torch.all(out[1] == 0)
    single = CpuExpertPool(2, "native").compute(hidden, rows[:1], experts[:1], torch.tensor([0.75]), expert_weights)
    torch.testing.assert_close(out[0], single[0], rtol=1e-5, atol=1e-6)  # 0.5 + 0.25 of the same expert


def test_kernel_choice_is_validated_and_torch_can_be_forced():
    assert CpuExpertPool(2, "torch").kernel == "torch"
    assert CpuExpertPool(2, "auto").kernel == "native"
    with pytest.raises(ValueError, match="cpu_expert_kernel"):
        ExpertConfig(cpu_expert_kernel="fast")


@pytest.mark.parametrize("kernel", ["native", "torch"])
def test_accumulate_adds_into_the_given_rows(kernel):
    hidden, rows, experts, weights, expert_weights = _case(torch.float32, 8, 64, 32, 6, 10, seed=5)
    expected = CpuExpertPool(2, "torch").compute(hidden, rows, experts, weights, expert_weights)
    out = torch.ones(6, 64)
    CpuExpertPool(2, kernel).accumulate(hidden, rows.numpy(), experts.numpy(), weights.numpy(), expert_weights, out)
    torch.testing.assert_close(out, expected + 1, rtol=1e-5, atol=1e-5)


def test_a_forked_child_computes_without_the_parents_workers():
    import os
    import time

    case = _case(torch.float32, 6, 64, 32, 2, 5, seed=9)
    pool = CpuExpertPool(3, "native")
    expected = pool.compute(*case)  # the parent's workers exist now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: its copy of the pool has no workers; the call must still finish
        try:
            ok = torch.allclose(pool.compute(*case), expected)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 30
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            pytest.fail("the forked child hung in the native kernel")
        time.sleep(0.05)
    assert os.read(read, 1) == b"1"
