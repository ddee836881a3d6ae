"""packed_q8_joined: two row segments of different types in one 8-bit GEMV launch give the numbers of one
packed_gemv_q8 launch a segment at the same tiling, into their own columns of one output."""

from __future__ import annotations

import os

import pytest
import torch

from test_packed_gemv import random_blocks  # this folder's module by name (see test_packed_q8.py)
from strata.kernels import packed_q8, packed_q8_joined, q8_rounding
from strata.kernels.packed_gemv import Q4_K, Q5_K, Q6_K, Q8_0
from strata.kernels.packed_iquants import IQ3_XXS

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or packed_q8_joined.triton is None,
                                 reason="the kernels in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")


def check_joined(qtypes: tuple[int, int], ns: tuple[int, int], rows: int, k: int, device: str) -> None:
    segments = [(q, random_blocks(q, n, k, seed=n + q).to(device)) for q, n in zip(qtypes, ns)]
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k + rows)).to(torch.bfloat16).to(device)
    quantized = q8_rounding.quantize(x)
    cfg = packed_q8.default_config(sum(ns), k, rows)
    out = torch.full((rows, sum(ns) + 3), float("nan"), device=device)[:, 1:sum(ns) + 1]  # columns of a wider row
    packed_q8_joined.packed_gemv_q8_joined(x, segments, k, quantized=quantized, out=out)
    parts = [packed_q8.packed_gemv_q8(x, b, q, b.shape[0], k, config=cfg, quantized=quantized) for q, b in segments]
    assert torch.equal(out.cpu(), torch.cat(parts, dim=1).cpu())


@interpreted
@pytest.mark.parametrize("qtypes, ns", [((Q4_K, Q6_K), (9, 5)), ((Q5_K, Q8_0), (4, 7)), ((IQ3_XXS, Q4_K), (3, 2))])
@pytest.mark.parametrize("rows", [1, 3])
def test_joined_gemv_in_the_interpreter(qtypes, ns, rows):
    check_joined(qtypes, ns, rows, 512, "cpu")


@gpu
@pytest.mark.parametrize("qtypes, ns", [((Q4_K, Q6_K), (4608, 512)), ((Q5_K, Q8_0), (1000, 33)),
                                        ((IQ3_XXS, Q4_K), (64, 2048))])
@pytest.mark.parametrize("rows", [1, 2, 5, 8])
def test_joined_gemv_equals_one_launch_a_segment(qtypes, ns, rows):
    check_joined(qtypes, ns, rows, 2048, "cuda")


def test_joinable_takes_two_segments_of_types_the_8_bit_gemv_reads():
    blocks = {q: random_blocks(q, 4, 256, seed=q) for q in (Q4_K, Q6_K)}
    assert packed_q8_joined.joinable([(Q4_K, blocks[Q4_K]), (Q6_K, blocks[Q6_K])], 256, 1)
    assert not packed_q8_joined.joinable([(Q4_K, blocks[Q4_K])], 256, 1)
    assert not packed_q8_joined.joinable([(Q4_K, blocks[Q4_K]), (Q6_K, blocks[Q6_K])], 256,
                                         packed_q8.LINEAR_MAX_ROWS + 1)
