"""Qwen4-Exp's hyper-connection mixer in two launches for few rows (decode and verification steps).

The torch form (`hyper_mix_ref`, what strata.model.hyper computes) is a dozen small launches per mixer,
two mixers a layer: a grouped RMSNorm of the streams, a low-rank down projection, silu, an up projection,
sigmoid, a product and a mean over the streams, and the per-stream write weights. Here:

1. `_down_kernel`, one program per (row, block of down/inject outputs): each normalises the row's streams
   (every program recomputes the norms: a row is a few tens of KB), takes its outputs' dot products with
   the normed row, and writes silu(down / hc) and the write weights 2 sigmoid(inject / hc); the first
   program of a row also writes the normed row.
2. `_up_kernel`, one program per (row, block of hidden columns): for each stream, the up projection's rows
   of those columns dotted with the low-rank vector, sigmoid, times the normed stream; the mean over
   streams is the block input.

Everything accumulates in float32 and rounds once, where the torch form rounds each op's output to the
model dtype: in bf16 the two agree to bf16 rounding, not bit for bit. Each program rereads the weights it
needs, so the kernels are for few rows (`MAX_ROWS`); longer steps take the torch form (GEMMs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: hyper_mix_ref still works
    triton = tl = None

MAX_ROWS = 16


def group_rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, group: int, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm of each `group`-sized slice of the last dim: x [..., G * group] -> same shape,
    (1 + weight) * x̂ with weight [G * group], in float32 and cast back (HF's form)."""
    x32 = x.float().unflatten(-1, (-1, group))
    x32 = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2)
    return (x32 * (1.0 + weight.float())).to(x.dtype)


def hyper_mix_ref(streams: torch.Tensor, norm_weight: torch.Tensor, down: torch.Tensor, up: torch.Tensor,
                  inject: torch.Tensor | None, hc: int, eps: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """streams [T, hc * D] -> (block input [T, D], write weights [T, hc] or None); weights down [R, hc * D],
    up [hc * D, R], inject [hc, hc * D], norm_weight [hc * D] (zero-centred). HF's op order and dtypes."""
    normed = group_rms_norm_ref(streams, norm_weight, streams.shape[-1] // hc, eps)
    mix = torch.sigmoid(F.linear(F.silu(F.linear(normed, down) / hc), up))
    block_input = (mix * normed).unflatten(-1, (hc, -1)).mean(dim=-2)
    if inject is None:
        return block_input, None
    return block_input, 2 * torch.sigmoid(F.linear(normed, inject) / hc)


def hyper_mix(streams: torch.Tensor, norm_weight: torch.Tensor, down: torch.Tensor, up: torch.Tensor,
              inject: torch.Tensor | None, hc: int, eps: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hyper_mix_ref's contract in two launches; streams [T <= MAX_ROWS, hc * D] contiguous, weights
    contiguous in the streams' dtype."""
    rows, width = streams.shape
    rank, hidden = down.shape[0], width // hc
    num_inject = 0 if inject is None else hc
    normed = torch.empty_like(streams)
    low = torch.empty(rows, rank, device=streams.device, dtype=torch.float32)
    weights = torch.empty(rows, max(num_inject, 1), device=streams.device, dtype=torch.float32)
    block_r = 8
    _down_kernel[(rows, triton.cdiv(rank + num_inject, block_r))](
        streams, norm_weight, down, inject if inject is not None else down, normed, low, weights,
        width, hidden, rank, num_inject, eps, 1.0 / hc, HC=hc, BLOCK_C=512, BLOCK_R=block_r)
    out = torch.empty(rows, hidden, device=streams.device, dtype=streams.dtype)
    block_d = 32
    _up_kernel[(rows, triton.cdiv(hidden, block_d))](
        normed, low, up, out, width, hidden, rank, 1.0 / hc, HC=hc, BLOCK_D=block_d,
        BLOCK_R=triton.next_power_of_2(min(rank, 128)))
    return out, (weights.to(streams.dtype) if inject is not None else None)


if triton is not None:
    @triton.jit
    def _down_kernel(x_ptr, norm_w_ptr, down_ptr, inject_ptr, normed_ptr, low_ptr, weights_ptr,
                     width, hidden, rank, num_inject, eps, inv_hc,
                     HC: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr):
        row, block = tl.program_id(0), tl.program_id(1)
        outs = block * BLOCK_R + tl.arange(0, BLOCK_R)                       # down rows, then inject rows
        is_down = outs < rank
        is_inject = (outs >= rank) & (outs < rank + num_inject)
        acc = tl.zeros([BLOCK_R], dtype=tl.float32)
        x_row = x_ptr + row * width
        for s in tl.static_range(HC):
            sumsq = tl.zeros([BLOCK_C], dtype=tl.float32)
            for c0 in range(0, hidden, BLOCK_C):
                cols = c0 + tl.arange(0, BLOCK_C)
                v = tl.load(x_row + s * hidden + cols, mask=cols < hidden, other=0.0).to(tl.float32)
                sumsq += v * v
            rstd = tl.rsqrt(tl.sum(sumsq, axis=0) / hidden + eps)
            for c0 in range(0, hidden, BLOCK_C):
                cols = c0 + tl.arange(0, BLOCK_C)
                ok = cols < hidden
                at = s * hidden + cols                                            # [BLOCK_C] in the row
                v = tl.load(x_row + at, mask=ok, other=0.0).to(tl.float32)
                w = tl.load(norm_w_ptr + at, mask=ok, other=0.0).to(tl.float32)
                normed = (v * rstd * (1.0 + w)).to(normed_ptr.dtype.element_ty)
                if block == 0:
                    tl.store(normed_ptr + row * width + at, normed, mask=ok)
                d = tl.load(down_ptr + outs[:, None] * width + at[None, :], mask=is_down[:, None] & ok[None, :],
                            other=0.0)
                i = tl.load(inject_ptr + (outs - rank)[:, None] * width + at[None, :],
                            mask=is_inject[:, None] & ok[None, :], other=0.0)
                acc += tl.sum((d + i).to(tl.float32) * normed.to(tl.float32)[None, :], axis=1)
        scaled = acc * inv_hc
        tl.store(low_ptr + row * rank + outs, scaled / (1.0 + tl.exp(-scaled)), mask=is_down)
        tl.store(weights_ptr + row * num_inject + (outs - rank), 2.0 / (1.0 + tl.exp(-scaled)), mask=is_inject)

    @triton.jit
    def _up_kernel(normed_ptr, low_ptr, up_ptr, out_ptr, width, hidden, rank, inv_hc,
                   HC: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr):
        row, block = tl.program_id(0), tl.program_id(1)
        cols = block * BLOCK_D + tl.arange(0, BLOCK_D)
        ok = cols < hidden
        total = tl.zeros([BLOCK_D], dtype=tl.float32)
        for s in tl.static_range(HC):
            at = s * hidden + cols                                                # rows of `up`, columns of the row
            gate = tl.zeros([BLOCK_D], dtype=tl.float32)
            for r0 in range(0, rank, BLOCK_R):
                rs = r0 + tl.arange(0, BLOCK_R)
                low = tl.load(low_ptr + row * rank + rs, mask=rs < rank, other=0.0)
                w = tl.load(up_ptr + at[:, None] * rank + rs[None, :], mask=ok[:, None] & (rs < rank)[None, :],
                            other=0.0).to(tl.float32)
                gate += tl.sum(w * low[None, :], axis=1)
            normed = tl.load(normed_ptr + row * width + at, mask=ok, other=0.0).to(tl.float32)
            total += normed / (1.0 + tl.exp(-gate))
        tl.store(out_ptr + row * hidden + cols, (total * inv_hc).to(out_ptr.dtype.element_ty), mask=ok)
