"""Qwen4-Exp's PLE layer (strata.model.ple) in three launches besides its projections and table lookup.

The torch form is ~140 small launches a layer on a decode step (the n-gram context's gathers and hashes, three
grouped RMSNorms, the gate's eight element-wise ops, the dilated causal conv's history gathers and SiLU, the
add), ~0.3 ms of a step on the H200 where the layer's bytes take microseconds. Here:

0. `ple_rows`, one program per sequence: each token's n-grams (the token and up to N-1 before it from the
   step's ids or the slot's remembered context, cut at an EOS) hashed to the table rows [T, heads]; the last
   N-1 real tokens become the slot's context (and with `keep_window_states` the context after every token is
   kept, for rollback).
1. `ple_gate`, one program per token: for each stream h, the zero-centred RMSNorms of the key (norm_key) and
   of the stream (norm_query), their dot over sqrt(D), sign(g) sqrt(|g|), sigmoid, times the value -> the
   gated row; and its norm (norm_conv), the conv's input.
2. `ple_conv`, one program per (sequence, channel block): the depthwise causal conv with dilation over each
   sequence's tokens after its remembered inputs, SiLU, plus the gated row; the last (K-1) * N real inputs
   become the sequence's history, and with `keep_window_states` the history after every token is kept too
   (for rollback), as strata.model.gated_delta_net.causal_conv1d_ragged lays them out.

Both round to the model dtype where the torch form rounds an op's output (the sums run in float32 in
another order): in float32 they agree to rounding, in bf16 to about an ulp of each rounded op.
"""

from __future__ import annotations

import math

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: the refs still work
    triton = tl = None

from strata.kernels.hyper import group_rms_norm_ref
from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.gdn import conv_input, sequence_window
    from strata.kernels.launch import wait_for_previous_kernel


def ple_rows(input_ids: torch.Tensor, context: torch.Tensor, ctx, multipliers: torch.Tensor, sizes: torch.Tensor,
             offsets: torch.Tensor, eos: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """strata.model.ple.ngram_rows's contract (the layer's torch form) in one launch; `multipliers` a device
    tensor [N] int64."""
    ngram, heads = multipliers.shape[0], sizes.shape[0]
    hist = ngram - 1
    num_tokens = input_ids.shape[0]
    assert context.shape[1] == hist and context.stride(1) == 1 and heads % hist == 0
    rows = torch.empty(num_tokens, heads, dtype=torch.int64, device=input_ids.device)
    keep = ctx.keep_window_states
    window = torch.empty(num_tokens, hist, dtype=context.dtype, device=context.device) if keep else context
    real = ctx.real_query_lens
    slot_ids = ctx.state_slot_ids
    _rows_kernel[(slot_ids.shape[0],)](
        input_ids, context, slot_ids, ctx.query_start_loc, ctx.has_initial_state,
        real if real is not None else slot_ids, multipliers, sizes, offsets, rows, window, eos, context.stride(0),
        NGRAM=ngram, PER_NGRAM=heads // hist, HEADS_PAD=triton.next_power_of_2(heads),
        HIST_PAD=triton.next_power_of_2(hist), BLOCK_T=64, KEEP_WINDOW=keep, HAS_REAL=real is not None,
        num_warps=4, **pdl_options(input_ids))
    return rows, (window if keep else None)


def ple_gate_ref(keys: torch.Tensor, value: torch.Tensor, streams: torch.Tensor, key_weight: torch.Tensor,
                 query_weight: torch.Tensor, conv_weight: torch.Tensor, hc: int,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """keys [T, hc * D] (key_proj's output, not normed), value [T, D], streams [T, hc * D], the three norms'
    zero-centred weights [hc * D] -> (gated [T, hc * D], norm_conv(gated) [T, hc * D]): PerLayerEmbedding's
    torch form, op for op."""
    dim = value.shape[-1]
    keys = group_rms_norm_ref(keys, key_weight, dim, eps).unflatten(-1, (hc, dim))          # [T, hc, D]
    queries = group_rms_norm_ref(streams, query_weight, dim, eps).unflatten(-1, (hc, dim))
    gate = (keys * queries).sum(-1, keepdim=True) / math.sqrt(dim)                          # [T, hc, 1]
    gate = gate.abs().clamp_min(1e-6).sqrt() * gate.sign()
    gated = (torch.sigmoid(gate) * value.unsqueeze(-2)).flatten(-2)                         # [T, hc * D]
    return gated, group_rms_norm_ref(gated, conv_weight, dim, eps)


def ple_gate(keys: torch.Tensor, value: torch.Tensor, streams: torch.Tensor, key_weight: torch.Tensor,
             query_weight: torch.Tensor, conv_weight: torch.Tensor, hc: int,
             eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as ple_gate_ref in one launch (rows of unit column stride, one dtype)."""
    num_tokens, dim = value.shape
    assert keys.shape == streams.shape == (num_tokens, hc * dim)
    assert keys.stride(1) == value.stride(1) == streams.stride(1) == 1
    gated = torch.empty(num_tokens, hc * dim, dtype=value.dtype, device=value.device)
    normed = torch.empty_like(gated)
    if num_tokens:
        block_d = triton.next_power_of_2(dim)
        _gate_kernel[(num_tokens,)](keys, value, streams, key_weight, query_weight, conv_weight, gated, normed, dim,
                                    eps, 1.0 / math.sqrt(dim), keys.stride(0), value.stride(0), streams.stride(0),
                                    HC=hc, BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4,
                                    **pdl_options(value))
    return gated, normed


def ple_conv(x: torch.Tensor, gated: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, ctx,
             dilation: int, block_c: int = 256) -> tuple[torch.Tensor, torch.Tensor | None]:
    """strata.model.ple.conv_and_add's contract (the layer's torch form) in one launch; reads ctx's state_slot_ids,
    query_start_loc,
    has_initial_state, real_query_lens (a graph's padded prompt keeps the history after its real tokens) and
    keep_window_states."""
    num_tokens, channels = x.shape
    width, hist = weight.shape[1], conv_state.shape[2]
    assert hist == (width - 1) * dilation and x.stride(1) == gated.stride(1) == 1 and weight.is_contiguous()
    out = torch.empty_like(gated)
    keep = ctx.keep_window_states
    window = conv_state.new_empty(num_tokens, channels, hist) if keep else conv_state
    real = ctx.real_query_lens
    slot_ids = ctx.state_slot_ids
    _conv_kernel[(slot_ids.shape[0], triton.cdiv(channels, block_c))](
        x, gated, weight, conv_state, window, out, slot_ids, ctx.query_start_loc, ctx.has_initial_state,
        real if real is not None else slot_ids, channels, x.stride(0), gated.stride(0), conv_state.stride(0),
        conv_state.stride(1), conv_state.stride(2), window.stride(0), window.stride(1), window.stride(2),
        out.stride(0), WIDTH=width, DILATION=dilation, HIST_PAD=triton.next_power_of_2(hist), KEEP_WINDOW=keep,
        HAS_REAL=real is not None, BLOCK_C=block_c, num_warps=4, **pdl_options(x))
    return out, (window if keep else None)


if triton is not None:

    @triton.jit
    def _rounded(x, dtype: tl.constexpr):
        """x (float32) rounded to dtype, back in float32: where the torch form rounds an op's output."""
        return x.to(dtype).to(tl.float32)

    @triton.jit
    def _token_at(ids_ptr, context_ptr, start, pos, ok, has_init, eos, HIST: tl.constexpr):
        """Tokens at window positions pos (any shape; < 0: the slot's remembered context, EOS without one)
        -> int64."""
        from_ids = tl.load(ids_ptr + start + pos, mask=ok & (pos >= 0), other=0).to(tl.int64)
        from_context = tl.load(context_ptr + HIST + pos, mask=tl.where(has_init, ok & (pos < 0), False),
                               other=0.0).to(tl.int64)  # (has_init by a select: gdn.conv_input)
        remembered = tl.where(has_init, from_context, eos)
        return tl.where(pos >= 0, from_ids, remembered)

    @triton.jit
    def _rows_kernel(ids_ptr, context_ptr, slots_ptr, qsl_ptr, has_init_ptr, real_ptr, mult_ptr, sizes_ptr,
                     offsets_ptr, rows_ptr, window_ptr, eos, stride_c, NGRAM: tl.constexpr, PER_NGRAM: tl.constexpr,
                     HEADS_PAD: tl.constexpr, HIST_PAD: tl.constexpr, BLOCK_T: tl.constexpr,
                     KEEP_WINDOW: tl.constexpr, HAS_REAL: tl.constexpr, USE_PDL: tl.constexpr):
        HIST: tl.constexpr = NGRAM - 1
        HEADS: tl.constexpr = HIST * PER_NGRAM
        wait_for_previous_kernel(USE_PDL)
        seq = tl.program_id(0)
        slot, has_init, start, length = sequence_window(seq, slots_ptr, qsl_ptr, has_init_ptr)
        context_row = context_ptr + slot * stride_c
        heads = tl.arange(0, HEADS_PAD)
        h_ok = heads < HEADS
        sizes = tl.load(sizes_ptr + heads, mask=h_ok, other=1)[None, :]                   # [1, HP]
        offsets = tl.load(offsets_ptr + heads, mask=h_ok, other=0)[None, :]
        ngram_of_head = (heads // PER_NGRAM + 2)[None, :]                                 # each head's n
        back = tl.arange(0, HIST_PAD)[None, :]                                            # [1, HIST_PAD]
        for t0 in range(0, length, BLOCK_T):
            pos = t0 + tl.arange(0, BLOCK_T)                                             # [BT]
            ok = pos < length
            token = _token_at(ids_ptr, context_row, start, pos, ok, has_init, eos, HIST)
            mixed = token * tl.load(mult_ptr)
            picked = tl.zeros((BLOCK_T, HEADS_PAD), dtype=tl.int64)
            for s in tl.static_range(1, NGRAM):  # mixed: the hash of the (s + 1)-gram ending at each token
                previous = _token_at(ids_ptr, context_row, start, pos - s, ok, has_init, eos, HIST)
                if s > 1:
                    previous = tl.where(token == eos, eos, previous)  # past an EOS: EOS
                token = previous
                mixed = mixed ^ (token * tl.load(mult_ptr + s))
                picked = tl.where(ngram_of_head == s + 1, mixed[:, None], picked)
            at = (start + pos).to(tl.int64)[:, None]
            tl.store(rows_ptr + at * HEADS + heads[None, :], picked % sizes + offsets, mask=ok[:, None] & h_ok[None, :])
            if KEEP_WINDOW:  # the context after each token: its last N-1 tokens
                kept_ok = ok[:, None] & (back < HIST)
                kept = _token_at(ids_ptr, context_row, start, pos[:, None] - HIST + 1 + back, kept_ok, has_init, eos,
                                 HIST)                                                   # [BT, HIST_PAD]
                tl.store(window_ptr + at * HIST + back, kept.to(tl.float32), mask=kept_ok)
        # the last N-1 real tokens become the slot's context: all read before any is overwritten
        real = length
        if HAS_REAL:
            real = tl.minimum(tl.load(real_ptr + seq), length)
        last = tl.arange(0, HIST_PAD)
        new_context = _token_at(ids_ptr, context_row, start, real - HIST + last, last < HIST, has_init, eos, HIST)
        tl.debug_barrier()
        tl.store(context_row + last, new_context.to(tl.float32), mask=last < HIST)

    @triton.jit
    def _group_norm(x, w_ptr, cols, ok, dim, eps):
        """A stream's float32 row x [BD] (0 past dim) -> HF's zero-centred RMSNorm of it, float32."""
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        return x * tl.rsqrt(tl.sum(x * x, axis=0) / dim + eps) * (1.0 + w)

    @triton.jit
    def _gate_kernel(keys_ptr, value_ptr, streams_ptr, wk_ptr, wq_ptr, wc_ptr, gated_ptr, normed_ptr, dim, eps,
                     inv_sqrt_dim, stride_k, stride_v, stride_s, HC: tl.constexpr, BLOCK_D: tl.constexpr,
                     USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        t = tl.program_id(0).to(tl.int64)
        dtype = gated_ptr.dtype.element_ty
        offs = tl.arange(0, BLOCK_D)
        ok = offs < dim
        value = tl.load(value_ptr + t * stride_v + offs, mask=ok, other=0.0).to(tl.float32)        # [BD]
        for h in tl.static_range(HC):
            cols = h * dim + offs
            k = tl.load(keys_ptr + t * stride_k + cols, mask=ok, other=0.0).to(tl.float32)
            s = tl.load(streams_ptr + t * stride_s + cols, mask=ok, other=0.0).to(tl.float32)
            key = _rounded(_group_norm(k, wk_ptr, cols, ok, dim, eps), dtype)
            query = _rounded(_group_norm(s, wq_ptr, cols, ok, dim, eps), dtype)
            dot = _rounded(tl.sum(_rounded(key * query, dtype), axis=0), dtype)
            g = _rounded(dot * inv_sqrt_dim, dtype)
            magnitude = _rounded(tl.sqrt(_rounded(tl.maximum(tl.abs(g), 1e-6), dtype)), dtype)
            g = _rounded(tl.where(g > 0, magnitude, tl.where(g < 0, -magnitude, 0.0)), dtype)
            gate = _rounded(1.0 / (1.0 + tl.exp(-g)), dtype)
            gated = _rounded(gate * value, dtype)
            tl.store(gated_ptr + t * HC * dim + cols, gated.to(dtype), mask=ok)
            tl.store(normed_ptr + t * HC * dim + cols, _group_norm(gated, wc_ptr, cols, ok, dim, eps).to(dtype),
                     mask=ok)

    @triton.jit
    def _conv_kernel(x_ptr, gated_ptr, w_ptr, state_ptr, window_ptr, out_ptr, slots_ptr, qsl_ptr, has_init_ptr,
                     real_ptr, channels, stride_xt, stride_gt, stride_ss, stride_sc, stride_sw, stride_wt, stride_wc,
                     stride_ww, stride_ot, WIDTH: tl.constexpr, DILATION: tl.constexpr, HIST_PAD: tl.constexpr,
                     KEEP_WINDOW: tl.constexpr, HAS_REAL: tl.constexpr, BLOCK_C: tl.constexpr,
                     USE_PDL: tl.constexpr):
        HIST: tl.constexpr = (WIDTH - 1) * DILATION
        wait_for_previous_kernel(USE_PDL)
        seq, c_block = tl.program_id(0), tl.program_id(1)
        dtype = out_ptr.dtype.element_ty
        slot, has_init, start, length = sequence_window(seq, slots_ptr, qsl_ptr, has_init_ptr)
        offs_c = c_block * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = offs_c < channels
        row_ptr = state_ptr + slot * stride_ss
        # conv_input reads HIST remembered inputs as a conv of width HIST + 1 would (the taps here are dilated)
        back = tl.arange(0, HIST_PAD)[:, None]                                           # [HP, 1]
        tile_ok = c_ok[None, :] & (back < HIST)                                          # [HP, BC]
        for t in range(0, length):
            acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
            for j in tl.static_range(WIDTH):  # tap j reads the input (WIDTH - 1 - j) * DILATION tokens back
                x_j = conv_input(x_ptr, row_ptr, start, t - HIST + j * DILATION, offs_c, offs_c, c_ok, has_init,
                                 stride_xt, stride_sc, stride_sw, HIST + 1)
                acc += x_j * tl.load(w_ptr + offs_c * WIDTH + j, mask=c_ok, other=0.0).to(tl.float32)
            conv = _rounded(acc, dtype)
            silu = _rounded(conv / (1.0 + tl.exp(-conv)), dtype)
            row = (start + t).to(tl.int64)
            gated = tl.load(gated_ptr + row * stride_gt + offs_c, mask=c_ok, other=0.0).to(tl.float32)
            tl.store(out_ptr + row * stride_ot + offs_c, (gated + silu).to(dtype), mask=c_ok)
            if KEEP_WINDOW:  # the history after this token: its last HIST inputs
                kept = conv_input(x_ptr, row_ptr, start, t - HIST + 1 + back, offs_c[None, :], offs_c[None, :],
                                  tile_ok, has_init, stride_xt, stride_sc, stride_sw, HIST + 1)  # [HP, BC]
                tl.store(window_ptr + row * stride_wt + offs_c[None, :] * stride_wc + back * stride_ww,
                         kept.to(window_ptr.dtype.element_ty), mask=tile_ok)
        # the last HIST real inputs become the new history: all read before any is overwritten
        real = length
        if HAS_REAL:
            real = tl.minimum(tl.load(real_ptr + seq), length)
        history = conv_input(x_ptr, row_ptr, start, real - HIST + back, offs_c[None, :], offs_c[None, :], tile_ok,
                             has_init, stride_xt, stride_sc, stride_sw, HIST + 1)        # [HP, BC]
        tl.debug_barrier()
        tl.store(row_ptr + offs_c[None, :] * stride_sc + back * stride_sw, history.to(state_ptr.dtype.element_ty),
                 mask=tile_ok)
