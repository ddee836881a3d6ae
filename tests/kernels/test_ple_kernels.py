"""Qwen4-Exp's PLE layer kernels (strata.kernels.ple) against the layer's torch forms (strata.model.ple): the
n-gram rows (context, EOS cut, hashes), the gate (three grouped norms, the signed square root, sigmoid, value)
and the dilated causal conv with SiLU and the add, over ragged sequences (decode rows, verification windows, a
prompt chunk, a padded graph prompt), with and without a remembered context and with the per-token states kept.
The torch forms alone run on the CPU; the kernels in Triton's interpreter (TRITON_INTERPRET=1) and on the GPU
(`-m gpu`). The layer's output against HF transformers: tests/model."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from strata.kernels.ple import ple_gate_ref
from strata.model.ple import conv_and_add, ngram_rows

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="the kernels in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")


def randn(*shape, dtype=torch.float32, device="cpu", seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(device=device, dtype=dtype)


def step_context(query_lens, slots, has_initial, device, real_lens=None, keep=False):
    """What ple_conv and causal_conv1d_ragged read of a ForwardContext."""
    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    derived = {}
    return SimpleNamespace(
        query_lens=list(query_lens), num_seqs=len(query_lens), query_start_loc=starts,
        state_slot_ids=torch.tensor(slots, device=device), has_initial_state=torch.tensor(has_initial, device=device),
        real_query_lens=None if real_lens is None else torch.tensor(real_lens, dtype=torch.int32, device=device),
        keep_window_states=keep, cached=lambda key, build: derived.setdefault(key, build()))


def check_gate(hc, dim, num_tokens, dtype, device):
    from strata.kernels.ple import ple_gate

    keys = randn(num_tokens, hc * dim, dtype=dtype, device=device, seed=1)
    value = randn(num_tokens, dim, dtype=dtype, device=device, seed=2)
    streams = randn(num_tokens, hc * dim, dtype=dtype, device=device, seed=3, scale=4.0)
    weights = [randn(hc * dim, dtype=dtype, device=device, seed=4 + i, scale=0.2) for i in range(3)]
    gated, normed = ple_gate(keys, value, streams, *weights, hc, 1e-6)
    ref_gated, ref_normed = ple_gate_ref(keys, value, streams, *weights, hc, 1e-6)
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3 if dtype == torch.float16 else 1e-5
    torch.testing.assert_close(gated.float(), ref_gated.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(normed.float(), ref_normed.float(), rtol=tol, atol=tol)


CONV_CASES = [  # (query lens, has an initial state, real lens of a padded graph prompt or None, keep window states)
    ([1, 1, 1], [True, False, True], None, False),
    ([4, 1, 4], [True, True, False], None, True),
    ([7, 2], [False, True], None, False),
    ([8, 1], [False, True], [5, 1], False),
]


def check_conv(case, dtype, device, channels=96, width=4, dilation=3):
    from strata.kernels.ple import ple_conv

    query_lens, has_initial, real_lens, keep = case
    num_tokens, hist = sum(query_lens), (width - 1) * dilation
    slots = list(range(len(query_lens)))[::-1]
    x = randn(num_tokens, channels, dtype=dtype, device=device, seed=5)
    gated = randn(num_tokens, channels, dtype=dtype, device=device, seed=6)
    weight = randn(channels, width, dtype=dtype, device=device, seed=7, scale=0.5)
    state = randn(len(query_lens) + 1, channels, hist, dtype=dtype, device=device, seed=8)
    ref_state = state.clone()
    ctx = step_context(query_lens, slots, has_initial, device, real_lens, keep)
    out, window = ple_conv(x, gated, weight, state, ctx, dilation, block_c=64)
    ref_out, ref_window = conv_and_add(x, gated, weight, ref_state, step_context(query_lens, slots, has_initial,
                                                                               device, real_lens, keep), dilation)
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3 if dtype == torch.float16 else 1e-5
    torch.testing.assert_close(out.float(), ref_out.float(), rtol=tol, atol=tol)
    assert torch.equal(state, ref_state)  # histories are copies of inputs: exact
    assert (window is None) == (ref_window is None) and (window is None or torch.equal(window, ref_window))


ROWS_CASES = [  # (query lens, has a remembered context, real lens of a padded graph prompt or None, keep contexts)
    ([1, 1, 1], [True, False, True], None, False),
    ([4, 1, 4], [True, True, False], None, True),
    ([70, 2], [False, True], None, True),     # a prompt chunk past one block of tokens
    ([8, 1], [True, True], [5, 1], False),
]


def check_rows(case, device, ngram=3, per_ngram=2, eos=0, vocab=40):
    """Every row id, per-token context and updated context exactly (integers), EOS among the ids and the
    remembered contexts so the cut is exercised."""
    from strata.kernels.ple import ple_rows
    from strata.model.ple import hash_multipliers, head_vocab_sizes

    query_lens, has_initial, real_lens, keep = case
    num_tokens, heads = sum(query_lens), (ngram - 1) * per_ngram
    generator = torch.Generator().manual_seed(num_tokens)
    input_ids = torch.randint(0, 6, (num_tokens,), generator=generator).to(device)   # EOS (0) often
    context = torch.randint(0, 6, (len(query_lens) + 1, ngram - 1), generator=generator).float().to(device)
    sizes = head_vocab_sizes(1000, 0, heads)
    sizes_t = torch.tensor(sizes, device=device)
    offsets = torch.tensor([sum(sizes[:h]) for h in range(heads)], device=device)
    multipliers = hash_multipliers(vocab, ngram, 0, 1234)
    slots = list(range(len(query_lens)))[::-1]
    ref_context = context.clone()
    rows, window = ple_rows(input_ids, context, step_context(query_lens, slots, has_initial, device, real_lens, keep),
                            torch.tensor(multipliers, device=device), sizes_t, offsets, eos)
    ref_rows, ref_window = ngram_rows(input_ids, ref_context, step_context(query_lens, slots, has_initial, device,
                                                                            real_lens, keep),
                                       multipliers, sizes_t, offsets, eos)
    assert torch.equal(rows, ref_rows) and torch.equal(context, ref_context)
    assert (window is None) == (ref_window is None) and (window is None or torch.equal(window, ref_window))


def test_ngram_rows_cut_at_an_eos():
    """ngram_rows (the torch form) on one sequence without a context: its n-grams are those of the tokens after
    the last EOS (EOS before), hashed as the module says."""
    from strata.model.ple import hash_multipliers

    multipliers = hash_multipliers(40, 3, 0, 1234)
    sizes, offsets = torch.tensor([101, 103, 107, 109]), torch.tensor([0, 101, 204, 311])
    ids = torch.tensor([7, 0, 9, 11])
    context = torch.zeros(1, 2)
    rows, _ = ngram_rows(ids, context, step_context([4], [0], [False], "cpu"), multipliers, sizes, offsets, 0)
    m0, m1, m2 = multipliers
    # token 9 (after EOS 0): its bigram (0, 9), its trigram cut: (EOS, 0, 9) -> 0 before 0
    bigram, trigram = 9 * m0 ^ 0 * m1, 9 * m0 ^ 0 * m1 ^ 0 * m2
    assert rows[2].tolist() == [bigram % 101, bigram % 103 + 101, trigram % 107 + 204, trigram % 109 + 311]
    trigram_11 = 11 * m0 ^ 9 * m1 ^ 0 * m2
    assert rows[3, 2].item() == trigram_11 % 107 + 204
    assert context[0].tolist() == [9.0, 11.0]


def test_gate_ref_follows_the_reference_op_order():
    """ple_gate_ref on a PerLayerEmbedding's own norms and projections computes HF's op order, written out."""
    from strata.config import ModelConfig
    from strata.model.ple import PerLayerEmbedding

    cfg = ModelConfig(architecture="Qwen4ExpForCausalLM", vocab_size=64, hidden_size=16, intermediate_size=8,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8, hc_count=3,
                      ple_layers=(0,), ple_embed_dim=8, ngram_size=3, heads_per_ngram=2, ngram_vocab_size_base=101,
                      eos_token_ids=(0,))
    layer = PerLayerEmbedding(cfg, 0, 0)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.3)
    embeddings, streams = randn(5, 8, seed=1), randn(5, 48, seed=2)
    keys, value = layer.key_proj(embeddings), layer.value_proj(embeddings)
    gated, normed = ple_gate_ref(keys, value, streams, layer.norm_key.weight, layer.norm_query.weight,
                                 layer.norm_conv.weight, 3, layer.norm_key.eps)
    expected_keys = layer.norm_key(keys).unflatten(-1, (3, 16))
    gate = (expected_keys * layer.norm_query(streams).unflatten(-1, (3, 16))).sum(-1, keepdim=True) / 4.0
    gate = gate.abs().clamp_min(1e-6).sqrt() * gate.sign()
    expected = (torch.sigmoid(gate) * value.unsqueeze(-2)).flatten(-2)
    assert torch.equal(gated, expected) and torch.equal(normed, layer.norm_conv(expected))


@interpreted
@pytest.mark.parametrize("case", ROWS_CASES)
def test_ple_rows_interpreted(case):
    check_rows(case, "cpu")


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_ple_gate_interpreted(dtype):
    check_gate(3, 40, 5, dtype, "cpu")


@interpreted
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_ple_conv_interpreted(case, dtype):
    check_conv(case, dtype, "cpu")


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(4, 2560, 1), (4, 2560, 8), (3, 40, 5)])
def test_ple_gate_on_cuda(shape, dtype):
    check_gate(*shape, dtype, "cuda")


@gpu
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_ple_conv_on_cuda(case, dtype):
    check_conv(case, dtype, "cuda", channels=4 * 2560)


@gpu
@pytest.mark.parametrize("case", ROWS_CASES)
def test_ple_rows_on_cuda(case):
    check_rows(case, "cuda")
