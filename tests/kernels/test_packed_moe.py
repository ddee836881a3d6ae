"""packed_moe (a layer's routed experts over GGUF blocks, CUDA) against packed_moe_ref in float32 on the
same blocks: the CUDA paths (8-bit pairs, pairs, grouped, dequantized experts + 16-bit grouped GEMMs) on the
types the block kernels read (IQ4_XS / IQ4_NL and the i-quants not on packed_mmq), experts spaced further
apart than their size (slot views), skipped pairs, and inside a CUDA graph capture; the float pairs and grouped
kernels also in Triton's interpreter on the CPU (TRITON_INTERPRET=1)."""

from __future__ import annotations

import os

import gguf
import numpy as np
import pytest
import torch

from gguf_writer import random_blocks
from strata.kernels import packed_moe as packed_moe_module
from strata.kernels.packed_gemv import IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K, Q4_0, Q4_K, Q5_0, Q5_K, Q6_K, Q8_0
from strata.kernels.packed_iquants import IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS
from strata.kernels.packed_moe import packed_moe, packed_moe_ref, pairs_supported, q8_pairs_supported
from test_packed_gemv import random_blocks as gemv_blocks  # this folder's module by name (see test_packed_q8)

# every i-quant once as gate/up and once as down
IQ_PAIRS = [(IQ2_XXS, IQ3_S), (IQ3_XXS, IQ2_XS), (IQ2_S, IQ1_M), (IQ1_S, IQ2_XXS), (IQ3_S, IQ3_XXS), (IQ2_XS, IQ1_S),
            (IQ1_M, IQ2_S)]

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="the kernels in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")


def experts(qtype: int, num: int, rows: int, k: int, seed: int, pad: int = 0) -> torch.Tensor:
    """uint8 [num, rows, row bytes] of valid blocks; with `pad`, a view into a buffer with `pad` spare bytes
    after each expert (as a layer's view of device slots sized for a larger layer)."""
    rng = np.random.default_rng(seed)
    # gguf_writer's random_blocks sets a float16 d, which IQ1_M spreads over 4 nibbles and MXFP4 has not (an exponent)
    if qtype in (IQ1_M, MXFP4):
        blocks = gemv_blocks(qtype, num * rows, k, seed, low=5e-3, high=1.5e-2).view(num, rows, -1)
    else:
        blocks = torch.from_numpy(random_blocks((num, rows, k), gguf.GGMLQuantizationType(qtype), rng, scale=1e-2))
    if not pad:
        return blocks
    flat = torch.zeros(num, blocks[0].numel() + pad, dtype=torch.uint8)
    flat[:, :blocks[0].numel()] = blocks.reshape(num, -1)
    return flat[:, :blocks[0].numel()].unflatten(1, blocks.shape[1:])


def case(qtype13: int, qtype2: int, tokens: int, dim: int = 512, inter: int = 256, num: int = 8, top_k: int = 4,
         pad: int = 0, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    w13 = experts(qtype13, num, 2 * inter, dim, seed, pad)
    w2 = experts(qtype2, num, dim, inter, seed + 1, pad)
    hidden = torch.randn(tokens, dim, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(num, generator=gen)[:top_k] for _ in range(tokens)])
    ids[0, -1] = -1  # a pair computed elsewhere
    weights = torch.rand(tokens, top_k, generator=gen)
    return hidden, w13, w2, ids, weights


def check(out: torch.Tensor, hidden, w13, qtype13, w2, qtype2, ids, weights) -> None:
    expected = packed_moe_ref(hidden.float(), w13, qtype13, w2, qtype2, ids, weights)
    scale = expected.abs().max().clamp_min(1e-6)
    # bf16 activations between the projections and bf16 output: a few bf16 ulps of the largest output
    assert ((out.float().cpu() - expected).abs().max() / scale) < 3e-2, (out, expected)


def test_pairs_kernel_types():
    """Every packed type (Q2_K, Q3_K and the i-quants included) in rows the block kernels read; not Q8_1, nor
    superblock rows that 256 does not divide."""
    Q8_1 = int(gguf.GGMLQuantizationType.Q8_1)
    assert pairs_supported(Q4_K, Q6_K, 2048, 768) and pairs_supported(Q8_0, Q8_0, 256, 256)
    assert pairs_supported(Q5_K, Q6_K, 2048, 768) and pairs_supported(Q4_K, Q5_0, 512, 640)
    assert pairs_supported(IQ4_XS, IQ4_XS, 2048, 768) and pairs_supported(Q2_K, Q3_K, 2048, 768)
    assert pairs_supported(Q3_K, Q2_K, 2048, 768)
    assert all(pairs_supported(q13, q2, 2048, 768) for q13, q2 in IQ_PAIRS)
    assert pairs_supported(IQ2_XXS, Q4_K, 2048, 768) and not pairs_supported(IQ2_XXS, IQ2_XXS, 2048, 640)
    assert not pairs_supported(Q8_1, Q6_K, 2048, 768) and not pairs_supported(Q4_K, Q4_K, 2048, 96)
    assert not pairs_supported(Q2_K, Q3_K, 2048, 640)


@pytest.mark.parametrize("qtypes", IQ_PAIRS + [(IQ2_XXS, Q3_K), (Q2_K, IQ3_S)])
def test_the_i_quants_take_the_8_bit_pairs(qtypes, monkeypatch):
    """packed_q8 reads the i-quants and IQ4_XS: a layer of them (alone or with a K type) takes the 8-bit pairs, as
    Q2_K experts do, unless a row is no whole number of superblocks."""
    from strata.kernels import packed_q8

    monkeypatch.setattr(packed_q8, "enabled", lambda: True)  # whatever STRATA_NO_Q8_ACTIVATIONS says
    w13, w2 = torch.zeros(4, 512, 84, dtype=torch.uint8), torch.zeros(4, 256, 84, dtype=torch.uint8)
    assert q8_pairs_supported(w13, qtypes[0], w2, qtypes[1], 256, 256) and pairs_supported(*qtypes, 256, 256)
    assert not q8_pairs_supported(w13, qtypes[0], w2, qtypes[1], 256, 320)
    w13_iq4 = torch.zeros(4, 512, 136, dtype=torch.uint8)
    assert q8_pairs_supported(w13_iq4, IQ4_XS, w2, qtypes[1], 256, 256)
    rows_on_half_words = torch.zeros(4, 512, 138, dtype=torch.uint8)[:, :, :136]
    assert not q8_pairs_supported(rows_on_half_words, IQ4_XS, w2, qtypes[1], 256, 256)


@gpu
@pytest.mark.parametrize("qtypes", [(Q4_K, Q6_K), (Q8_0, Q8_0), (Q6_K, Q4_K), (Q5_K, Q6_K), (IQ4_XS, IQ4_XS),
                                    (Q2_K, Q3_K), (Q3_K, Q2_K), (IQ2_XXS, IQ4_NL), (MXFP4, MXFP4)] + IQ_PAIRS)
@pytest.mark.parametrize("tokens", [1, 3, 40])
def test_packed_moe_matches_ref(qtypes, tokens):
    hidden, w13, w2, ids, weights = case(*qtypes, tokens, pad=96 if tokens == 3 else 0, seed=tokens)
    out = packed_moe(hidden.cuda(), on_device(w13), qtypes[0], on_device(w2), qtypes[1], ids.cuda(), weights.cuda())
    assert out.dtype == torch.bfloat16 and out.shape == hidden.shape
    check(out, hidden, w13, qtypes[0], w2, qtypes[1], ids, weights)


@gpu
@pytest.mark.parametrize("tokens", [1, 5, 70])
def test_every_path_matches_the_reference(tokens):
    """pairs (one program per pair), grouped (row blocks of an expert on the tensor cores; 70 tokens take
    64-row blocks), q8 grouped (packed_mmq) and dequantized, on the same case."""
    from strata.kernels import packed_mmq

    hidden, w13, w2, ids, weights = case(Q4_K, Q6_K, tokens, seed=7)
    args = (hidden.cuda(), w13.cuda(), Q4_K, w2.cuda(), Q6_K, ids.cuda(), weights.cuda())
    check(packed_moe_module._pairs(*args).sum(1).bfloat16(), hidden, w13, Q4_K, w2, Q6_K, ids, weights)
    check(packed_moe_module._grouped(*args).sum(1).bfloat16(), hidden, w13, Q4_K, w2, Q6_K, ids, weights)
    check(packed_mmq.moe_grouped_q8(*args).sum(1).bfloat16(), hidden, w13, Q4_K, w2, Q6_K, ids, weights)
    check(packed_moe_module._dequantized(*args, every_expert=False), hidden, w13, Q4_K, w2, Q6_K, ids, weights)
    partials = packed_moe(*args, sum_topk=False)
    assert partials.shape == (tokens, 4, 512) and partials.dtype == torch.float32
    assert torch.all(partials[0, -1] == 0)  # the skipped pair


@gpu
@pytest.mark.parametrize("qtypes, tokens", [((Q4_K, Q6_K), 1), ((Q4_K, Q6_K), 2), ((Q5_K, Q6_K), 2), ((Q2_K, Q3_K), 2),
                                            ((IQ2_XXS, IQ3_S), 2), ((IQ1_M, IQ2_S), 1)])
def test_packed_moe_in_a_cuda_graph(qtypes, tokens):
    hidden, w13, w2, ids, weights = case(*qtypes, tokens, seed=3)
    args = [hidden.cuda(), w13.cuda(), qtypes[0], w2.cuda(), qtypes[1], ids.cuda(), weights.cuda()]
    packed_moe(*args)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = packed_moe(*args)
    gen = torch.Generator().manual_seed(tokens)  # (the global generator's state follows the tests run before)
    new_ids = torch.stack([torch.randperm(8, generator=gen)[:4] for _ in range(tokens)])
    args[5].copy_(new_ids)
    graph.replay()
    torch.cuda.synchronize()
    if q8_pairs_supported(args[1], qtypes[0], args[3], qtypes[1], 512, 256):
        # the 8-bit pairs: their own contract (rounded activations, exact sums), not the float one within 3 %
        from test_packed_q8 import moe_reference

        expected = moe_reference(hidden, w13, qtypes[0], w2, qtypes[1], new_ids, weights).sum(1)
        assert ((out.float().cpu() - expected).abs().max() / expected.abs().max()) < 1e-2
    else:
        check(out, hidden, w13, qtypes[0], w2, qtypes[1], new_ids, weights)


def on_device(w: torch.Tensor, device: str = "cuda") -> torch.Tensor:
    """w [E, rows, row bytes] on `device` with its strides (a padded slot view stays padded)."""
    base = torch.zeros(w.shape[0], w.stride(0), dtype=torch.uint8, device=device)
    view = base[:, :w[0].numel()].unflatten(1, w.shape[1:])
    view.copy_(w)
    return view


@gpu
@pytest.mark.parametrize("tokens", [1, 3, 40])
@pytest.mark.parametrize("down_type", [Q8_0, Q5_0])
def test_packed_moe_with_partial_down_chunks(tokens, down_type):
    """Qwen4-Exp's layout at Q4_K_M: Q4_K gate/up over 512 values, down rows of 640 values (not whole
    256-value chunks) in llama.cpp's fallbacks Q8_0 (for Q6_K) and Q5_0 (for Q4_K); pairs and grouped paths
    against the reference."""
    hidden, w13, w2, ids, weights = case(Q4_K, down_type, tokens, dim=512, inter=640, seed=tokens)
    assert pairs_supported(Q4_K, down_type, 512, 640)
    out = packed_moe(hidden.cuda(), on_device(w13), Q4_K, on_device(w2), down_type, ids.cuda(), weights.cuda())
    check(out, hidden, w13, Q4_K, w2, down_type, ids, weights)


def test_prompts_leave_the_8_bit_pairs_at_fewer_pairs_an_expert(monkeypatch):
    """A step whose longest query is longer than a verification window (a prompt's) takes packed_mmq from
    PROMPT_Q8_PAIRS_PER_EXPERT pairs an expert on; windows and decode rows (or an unknown query) from
    Q8_PAIRS_PER_EXPERT; STRATA_Q8_PAIRS_PER_EXPERT sets both."""
    bound = packed_moe_module.q8_pairs_per_expert
    window = packed_moe_module.WINDOW_TOKENS
    assert bound(0) == bound(1) == bound(window) == packed_moe_module.Q8_PAIRS_PER_EXPERT == 4
    assert bound(window + 1) == bound(512) == packed_moe_module.PROMPT_Q8_PAIRS_PER_EXPERT == 3
    monkeypatch.setenv("STRATA_Q8_PAIRS_PER_EXPERT", "3")
    assert bound(1) == bound(512) == 3


@gpu
@pytest.mark.parametrize("qtype13, tokens, longest_query, path", [
    (Q4_K, 1, 0, "q8_pairs"), (Q4_K, 8, 0, "q8_pairs"), (Q4_K, 9, 0, "q8_grouped"), (Q4_K, 23, 0, "q8_grouped"),
    (Q4_K, 24, 0, "pairs"), (Q4_K, 33, 0, "grouped"), (Q5_K, 9, 0, "pairs"), (Q5_K, 40, 0, "grouped"),
    (Q4_K, 8, 16, "q8_pairs"), (Q4_K, 6, 17, "q8_pairs"), (Q4_K, 7, 17, "q8_grouped"), (Q4_K, 8, 64, "q8_grouped")])
def test_each_step_size_takes_its_path(qtype13, tokens, longest_query, path, monkeypatch):
    """8 experts, top 4. Up to Q8_PAIRS_PER_EXPERT (token, k) pairs an expert of the layer (32) go to the 8-bit
    pairs, whose time follows the pairs; Q4_K / Q6_K experts then to the 8-bit grouped kernels (packed_mmq) below
    MMQ_PAIRS_PER_EXPERT pairs an expert (96), whose time follows the rows; other types (and Q4_K from there on) to
    the float pairs up to PAIRS_MAX; then the float grouped kernels, which read each used expert once. A prompt's
    step (a query longer than a window) leaves the 8-bit pairs past PROMPT_Q8_PAIRS_PER_EXPERT (24 pairs)."""
    from strata.kernels import packed_mmq, packed_q8

    assert packed_moe_module.Q8_PAIRS_PER_EXPERT * 8 == 32 and packed_moe_module.MMQ_PAIRS_PER_EXPERT * 8 == 96
    assert 36 <= packed_moe_module.PAIRS_MAX < 160
    taken = []
    calls = {"q8_pairs": (packed_q8, "moe_pairs_q8"), "q8_grouped": (packed_mmq, "moe_grouped_q8"),
             "pairs": (packed_moe_module, "_pairs"), "grouped": (packed_moe_module, "_grouped")}
    for name, (module, attr) in calls.items():
        run = getattr(module, attr)
        monkeypatch.setattr(module, attr, lambda *a, run=run, name=name, **k: taken.append(name) or run(*a, **k))
    hidden, w13, w2, ids, weights = case(qtype13, Q6_K, tokens)
    out = packed_moe(hidden.cuda(), w13.cuda(), qtype13, w2.cuda(), Q6_K, ids.cuda(), weights.cuda(),
                     longest_query=longest_query)
    assert taken == [path]
    check(out, hidden, w13, qtype13, w2, Q6_K, ids, weights)


def test_the_8_bit_grouped_kernels_take_the_types_packed_mmq_reads(monkeypatch):
    """packed_mmq's types only (Q4_K / Q6_K, and Qwen4-Exp Q4_K_M's 640-wide Q8_0 / Q5_0 down rows), and neither
    with STRATA_NO_GROUPED_Q8=1 nor with 8-bit activations off."""
    w = torch.zeros(4, 8, 144 * 2, dtype=torch.uint8)
    supported = packed_moe_module.grouped_q8_supported
    assert supported(w, Q4_K, w, Q6_K, 512, 512)
    assert supported(w, Q4_K, w, Q8_0, 512, 640) and supported(w, Q4_K, w, Q5_0, 512, 640)
    assert not supported(w, Q5_K, w, Q6_K, 512, 512) and not supported(w, Q4_K, w, Q4_0, 512, 640)
    monkeypatch.setenv("STRATA_NO_GROUPED_Q8", "1")
    assert not supported(w, Q4_K, w, Q6_K, 512, 512)
    monkeypatch.delenv("STRATA_NO_GROUPED_Q8")
    monkeypatch.setenv("STRATA_NO_Q8_ACTIVATIONS", "1")
    assert not supported(w, Q4_K, w, Q6_K, 512, 512)


def test_grouped_row_blocks_follow_the_rows_an_expert():
    """64-row blocks (an expert decoded once) where an expert's rows fill most of one, or from 4 rows an expert in
    a layer of few experts; 16-row blocks for a many-expert layer's few rows an expert (its padding costs more)."""
    block_m = packed_moe_module.grouped_block_m
    assert block_m(128 * 8, 128) == 64 and block_m(128 * 4, 128) == 64 and block_m(128 * 2, 128) == 16
    assert block_m(512 * 10, 512) == 16 and block_m(512 * 15, 512) == 64 and block_m(512 * 12, 512) == 64


@interpreted
@pytest.mark.parametrize("qtypes", [(Q2_K, Q3_K), (Q3_K, Q2_K), (Q4_K, Q6_K), (IQ2_XXS, IQ4_NL), (MXFP4, MXFP4)]
                         + IQ_PAIRS)
@pytest.mark.parametrize("path", ["_pairs", "_grouped"])
def test_float_kernels_in_the_interpreter(qtypes, path):
    """The float pairs (packed_gemv's _chunk_dot) and grouped kernels (its _chunk_values) on the CPU in float32,
    experts in padded slots and a skipped pair, against the reference."""
    hidden, w13, w2, ids, weights = case(*qtypes, 2, dim=256, inter=256, num=4, top_k=2, pad=96, seed=5)
    hidden = hidden.float()
    run = getattr(packed_moe_module, path)  # wide programs: the interpreter runs them one by one
    partials = run(hidden, w13, qtypes[0], w2, qtypes[1], ids, weights, config=dict(BLOCK_N=64))
    assert torch.all(partials[0, -1] == 0)
    expected = packed_moe_ref(hidden, w13, qtypes[0], w2, qtypes[1], ids, weights)
    assert ((partials.sum(1) - expected).abs().max() / expected.abs().max()) < 1e-5
