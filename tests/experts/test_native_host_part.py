"""An offloaded layer's host part as one native call (strata/experts/native_host_part.py, native/offload_host_part.c)
against the Python host part it replaces (OffloadedExperts._host_part with native=None), on the CPU: the same
exchange buffers (HostExchange, unpinned on a CPU device) filled as a replayed graph would leave them, the same
layer's GGUF experts. The CPU sum must be the same bits (the pairs are listed in numpy's order and summed by the same
kernel), padding rows zero, and the pair counts per row the same."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.native_host_part import NativeHostPart
from strata.experts.provider import IN_PLACE, NOT_RESIDENT, HostExchange, OffloadedExperts
from strata.experts.slots import ExpertSlots
from strata.experts.stats import RoutingStats
from strata.kernels import cpu_quant

pytestmark = pytest.mark.skipif(not cpu_quant.supports(Q.Q4_K), reason="no C compiler to build the kernel")

NUM_EXPERTS, DIM, INTER, TOP_K, MAX_ROWS = 12, 256, 256, 4, 8
SCALES_AT = {Q.Q4_K: (0, 2), Q.Q6_K: (208,), Q.Q8_0: (0,), Q.Q5_0: (0,), Q.IQ4_XS: (0,)}  # float16 fields of a block


def make_blocks(qtype: Q, rows: int, k: int, seed: int) -> torch.Tensor:
    """uint8 [rows, row bytes]: random blocks of `qtype` whose float16 scales are small and finite."""
    rng = np.random.default_rng(seed)
    block, type_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, k // block, type_bytes), dtype=np.uint8)
    for offset in SCALES_AT[qtype]:
        raw[..., offset:offset + 2] = rng.uniform(-0.05, 0.05, (rows, k // block, 1)).astype(np.float16).view(np.uint8)
    return torch.from_numpy(raw.reshape(rows, -1))


class NoWait:  # the `copied` event of a captured step: nothing to wait for here
    def synchronize(self) -> None:
        pass


def make_provider(qtypes: tuple[Q, Q], dtype: torch.dtype, pcie_frac: float = 0.0, kernel: str = "auto"):
    """(provider of layer 0, its exchange, stats): GGUF experts of `qtypes` in host memory, some read in place."""
    w13 = make_blocks(qtypes[0], NUM_EXPERTS * 2 * INTER, DIM, 1).view(NUM_EXPERTS, 2 * INTER, -1)
    w2 = make_blocks(qtypes[1], NUM_EXPERTS * DIM, INTER, 2).view(NUM_EXPERTS, DIM, -1)
    slots = ExpertSlots([w13], [w2], num_slots=2, num_staging=1, device="cpu", qtypes=[tuple(map(int, qtypes))])
    slots.set_zero_copy([(0, e) for e in range(3)])  # (the graph marks pairs IN_PLACE only in such a layer)
    stats = RoutingStats(1, NUM_EXPERTS, "cpu")
    provider = OffloadedExperts(0, slots, CpuExpertPool(2, kernel), stats, pcie_frac=pcie_frac)
    provider.exchange = HostExchange(MAX_ROWS, TOP_K, DIM, dtype, "cpu")
    return provider, provider.exchange, stats


def fill(exchange: HostExchange, rows: int, seed: int, slot_choices=(NOT_RESIDENT, IN_PLACE, 0, 1)) -> None:
    """A replayed graph's exports: routing, slots (missed, read in place, resident) and rows; every buffer row past
    `rows` garbage, as a graph's padding may leave it."""
    rng = np.random.default_rng(seed)
    exchange.topk_ids_np[:] = [rng.choice(NUM_EXPERTS, TOP_K, replace=False) for _ in range(MAX_ROWS)]
    exchange.topk_weights_np[:] = rng.uniform(0.05, 0.5, (MAX_ROWS, TOP_K))
    exchange.slot_ids_np[:] = rng.choice(slot_choices, (MAX_ROWS, TOP_K))
    exchange.hidden.copy_(torch.from_numpy(rng.normal(0, 4, (MAX_ROWS, DIM))))
    exchange.cpu_sum.fill_(float("nan"))


def host_part(provider, native, real_rows: int, rows: int) -> tuple[torch.Tensor, np.ndarray, list[int]]:
    """(the CPU sum's first `rows` rows, the step's pairs per row [2, real rows], (CPU, PCIe) pairs counted)."""
    stats = provider.stats
    stats.begin_rows(real_rows)
    before = list(stats.host_pairs)
    provider._host_part(real_rows, rows, NoWait(), native)
    return (provider.exchange.cpu_sum[:rows].clone(), stats.take_rows(),
            [after - b for after, b in zip(stats.host_pairs, before)])


@pytest.mark.parametrize("qtypes", [(Q.Q4_K, Q.Q6_K), (Q.Q8_0, Q.Q5_0), (Q.IQ4_XS, Q.Q4_K)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_native_host_part_gives_the_python_parts_bits_and_counts(qtypes, dtype):
    provider, exchange, _ = make_provider(qtypes, dtype)
    native = provider._native_host_part(exchange)
    assert isinstance(native, NativeHostPart)
    for seed, (real_rows, rows) in enumerate([(1, 1), (1, 4), (3, 4), (8, 8), (5, 8)]):
        fill(exchange, rows, seed)
        expected = host_part(provider, None, real_rows, rows)
        fill(exchange, rows, seed)
        got = host_part(provider, native, real_rows, rows)
        assert torch.equal(got[0], expected[0]), (seed, (got[0] - expected[0]).abs().max())
        assert not got[0][real_rows:].any()  # padding rows zero
        assert np.array_equal(got[1], expected[1]) and got[2] == expected[2]
        assert got[2][0] == int((exchange.slot_ids_np[:real_rows] == NOT_RESIDENT).sum()) > 0


def test_rows_without_missed_pairs_leave_a_zero_sum():
    provider, exchange, _ = make_provider((Q.Q4_K, Q.Q6_K), torch.bfloat16)
    native = provider._native_host_part(exchange)
    fill(exchange, 4, 7, slot_choices=(IN_PLACE, 0, 1))
    total, counts, pairs = host_part(provider, native, 4, 4)
    assert not total.any() and pairs == [0, int((exchange.slot_ids_np[:4] == IN_PLACE).sum())]
    assert counts[0].sum() == 0 and counts[1].sum() == pairs[1]


def test_an_expert_outside_the_layer_is_a_clear_error():
    provider, exchange, _ = make_provider((Q.Q4_K, Q.Q6_K), torch.bfloat16)
    native = provider._native_host_part(exchange)
    fill(exchange, 2, 3, slot_choices=(NOT_RESIDENT,))
    exchange.topk_ids_np[1, 2] = NUM_EXPERTS
    with pytest.raises(ValueError, match="outside the layer's experts"):
        native(2, 2)
    with pytest.raises(ValueError, match="do not fit the exchange"):
        native(2, MAX_ROWS + 1)


def test_the_python_host_part_stays_where_the_native_one_does_not_run(monkeypatch):
    provider, exchange, _ = make_provider((Q.Q4_K, Q.Q6_K), torch.bfloat16, pcie_frac=0.5)
    assert provider._native_host_part(exchange) is None  # PCIe staging: the host part queues copies
    provider, exchange, _ = make_provider((Q.Q4_K, Q.Q6_K), torch.bfloat16, kernel="torch")
    assert provider._native_host_part(exchange) is None
    provider, exchange, _ = make_provider((Q.Q4_K, Q.Q6_K), torch.bfloat16)
    monkeypatch.setenv("STRATA_PY_HOST_PART", "1")
    assert provider._native_host_part(exchange) is None
    monkeypatch.delenv("STRATA_PY_HOST_PART")
    first = provider._native_host_part(exchange)
    assert first is not None and provider._native_host_part(exchange) is first
    provider.exchange = HostExchange(MAX_ROWS, TOP_K, DIM, torch.bfloat16, "cpu")  # a new exchange: new arguments
    assert provider._native_host_part(provider.exchange) not in (None, first)
