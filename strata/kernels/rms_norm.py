"""RMSNorm with an optional fused residual add: one program per row reads the row once, adds the
residual (rounded to the model dtype, as `x + residual` would be), writes the new residual and the
normalised row. Replaces the half-dozen elementwise launches of the torch form on every norm.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: rms_norm_ref still works
    triton = tl = None

from strata.kernels import q8_rounding
from strata.kernels.launch import pdl_options

if triton is not None:
    from triton.language.extra import libdevice

    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.q8_rounding import round_blocks


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False,
                 residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x [T, D] (+ residual [T, D]) -> (normalised [T, D], x + residual or None). Plain: weight * x̂ in
    the model dtype; zero-centred: (1 + weight) * x̂ in float32, cast back (the HF forms)."""
    if residual is not None:
        x = x + residual
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    out = (x32 * (1.0 + weight.float())).to(x.dtype) if zero_centered else weight * x32.to(x.dtype)
    return out, (x if residual is not None else None)


def gated_shared_ref(shared: torch.Tensor | None, gate: torch.Tensor | None) -> torch.Tensor | None:
    """A shared expert's output [T, D] times sigmoid(gate) [T, 1] in its dtype (Qwen3-Next's gate; the kernels
    that fold it round where this does), or shared itself without a gate."""
    return shared if gate is None or shared is None else torch.sigmoid(gate) * shared


def topk_sum_ref(partials: torch.Tensor, shared: torch.Tensor | None, dtype: torch.dtype,
                 shared_gate: torch.Tensor | None = None) -> torch.Tensor:
    """partials [T, K, D] float32 (weighted expert outputs) -> their sum over K in order, cast to dtype,
    plus the shared expert's output [T, D] (in dtype) if any, times sigmoid(shared_gate) [T, 1] if given (Qwen3-
    Next's gate, in dtype): what fused_moe + `out + sigmoid(gate) * shared` return."""
    shared = gated_shared_ref(shared, shared_gate)
    total = partials[:, 0]
    for k in range(1, partials.shape[1]):
        total = total + partials[:, k]
    total = total.to(dtype)
    return total if shared is None else total + shared


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False,
             residual: torch.Tensor | None = None, quantize: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as rms_norm_ref, for rows with unit stride along D. `quantize`: the same launch also
    rounds the normalised rows to 8 bits per 32 (q8_rounding.quantize's numbers, attached to the output by
    q8_rounding.attach) for the packed projections and experts that read it next."""
    return _launch(x, None, None, weight, eps, zero_centered, residual, x.dtype, quantize)


def rms_norm_topk_sum(partials: torch.Tensor, shared: torch.Tensor | None, weight: torch.Tensor, eps: float,
                      zero_centered: bool, residual: torch.Tensor, dtype: torch.dtype, quantize: bool = False,
                      shared_gate: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm_ref(topk_sum_ref(partials, shared, dtype, shared_gate), ..., residual) in one launch: the MoE
    layer's sum over its top-k expert rows (and its shared expert's gate) folds into the next norm instead of
    launches of their own."""
    assert partials.is_contiguous() and partials.dtype == torch.float32 and residual is not None
    if shared is not None:
        assert shared.stride(-1) == 1
    return _launch(partials, partials.shape[1], shared, weight, eps, zero_centered, residual, dtype, quantize,
                   shared_gate)


def _launch(x: torch.Tensor, top_k: int | None, shared: torch.Tensor | None, weight: torch.Tensor, eps: float,
            zero_centered: bool, residual: torch.Tensor | None, dtype: torch.dtype, quantize: bool = False,
            shared_gate: torch.Tensor | None = None):
    """x [..., D] rows, or with top_k: float32 partials [T, K, D] summed over K first; shared_gate [T, 1]."""
    dim = x.shape[-1]
    x2 = x.reshape(-1, dim) if top_k is None else x.view(-1, top_k * dim)
    assert x2.stride(-1) == 1 and weight.is_contiguous()
    out_shape = x.shape if top_k is None else (x.shape[0], dim)
    out = torch.empty(x2.shape[0], dim, dtype=dtype, device=x.device)
    new_residual = None
    if residual is not None:
        residual = residual.reshape(-1, dim)
        assert residual.stride(1) == 1
        new_residual = torch.empty_like(out)
    quantized = q8_rounding.empty_rounding(x2.shape[0], dim, x.device) if quantize else None  # [T, D], [T, D / 32] ...
    q_out = quantized if quantized is not None else (out, out, out)
    block_d = triton.next_power_of_2(dim)
    # a warp per 512 columns: 4 warps for 2048-wide rows measured faster than 8 on the H200 (session 11)
    _rms_norm_kernel[(x2.shape[0],)](
        x2, residual if residual is not None else x2, shared if shared is not None else x2, weight, out,
        new_residual if new_residual is not None else out, dim, eps, x2.stride(0),
        residual.stride(0) if residual is not None else 0, shared.stride(0) if shared is not None else 0,
        out.stride(0), *q_out, shared_gate if shared_gate is not None else out,
        shared_gate.stride(0) if shared_gate is not None else 0, HAS_RESIDUAL=residual is not None,
        ZERO_CENTERED=zero_centered, TOP_K=top_k or 0, HAS_SHARED=shared is not None,
        HAS_GATE=shared_gate is not None, QUANTIZE=quantized is not None, BLOCK_D=block_d,
        num_warps=min(16, max(1, block_d // 512)), **pdl_options(x))
    normed = out.view(out_shape)
    if quantized is not None:
        q8_rounding.attach(normed, quantized)
    return normed, (new_residual.view(out_shape) if new_residual is not None else None)


if triton is not None:

    @triton.jit
    def gated_shared(shared, gate, dtype: tl.constexpr):
        """shared [BLOCK] (dtype) times sigmoid(gate) (one value), as torch's `sigmoid(gate) * shared` rounds:
        the sigmoid as torch's CUDA kernel computes it (1 / (1 + expf(-x)), the accurate expf, an IEEE division)
        rounded to dtype, then the product rounded to dtype. The product is an IEEE multiply (mul_rn) so that
        the compiler cannot fuse it with the add that follows into one 16-bit FMA, which skips that rounding."""
        g = tl.div_rn(1.0, 1.0 + libdevice.exp(-gate.to(tl.float32))).to(dtype)
        return libdevice.mul_rn(g.to(tl.float32), shared.to(tl.float32)).to(dtype)

    @triton.jit
    def _rms_norm_kernel(x_ptr, res_ptr, shared_ptr, w_ptr, out_ptr, res_out_ptr, dim, eps, stride_x, stride_r,
                         stride_s, stride_o, q_ptr, dx_ptr, sums_ptr, gate_ptr, stride_g, HAS_RESIDUAL: tl.constexpr,
                         ZERO_CENTERED: tl.constexpr, TOP_K: tl.constexpr, HAS_SHARED: tl.constexpr,
                         HAS_GATE: tl.constexpr, QUANTIZE: tl.constexpr, BLOCK_D: tl.constexpr,
                         USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK_D)
        ok = offs < dim
        # every load is issued before any arithmetic waits on one: one memory round trip per row
        w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            r = tl.load(res_ptr + row * stride_r + offs, mask=ok, other=0.0)
        if HAS_SHARED:
            shared = tl.load(shared_ptr + row * stride_s + offs, mask=ok, other=0.0)
            if HAS_GATE:
                shared = gated_shared(shared, tl.load(gate_ptr + row * stride_g), out_ptr.dtype.element_ty)
        if TOP_K > 0:  # x: the row's K float32 expert outputs, summed in order and cast (topk_sum_ref)
            total = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
            for k in tl.static_range(1, TOP_K):
                total += tl.load(x_ptr + row * stride_x + k * dim + offs, mask=ok, other=0.0)
            x = total.to(out_ptr.dtype.element_ty)
            if HAS_SHARED:
                x = (x.to(tl.float32) + shared.to(tl.float32)).to(out_ptr.dtype.element_ty)
        else:
            x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
        if HAS_RESIDUAL:
            x = (x.to(tl.float32) + r.to(tl.float32)).to(out_ptr.dtype.element_ty)
            tl.store(res_out_ptr + row * stride_o + offs, x, mask=ok)
        xf = x.to(tl.float32)
        normed = xf * tl.rsqrt(tl.sum(xf * xf, axis=0) / dim + eps)
        if ZERO_CENTERED:
            y = normed * (1.0 + w)
        else:
            y = w * normed.to(out_ptr.dtype.element_ty).to(tl.float32)
        tl.store(out_ptr + row * stride_o + offs, y.to(out_ptr.dtype.element_ty), mask=ok)
        if QUANTIZE:  # q8_rounding's _quantize_kernel on the values just stored (masked columns are zeros)
            blocks = tl.reshape(y.to(out_ptr.dtype.element_ty).to(tl.float32), (BLOCK_D // 32, 32))
            q, dx = round_blocks(blocks)                                                    # [BD / 32, 32], [BD / 32]
            q_offs = tl.arange(0, BLOCK_D // 32)[:, None] * 32 + tl.arange(0, 32)[None, :]
            tl.store(q_ptr + row * dim + q_offs, q.to(tl.int8), mask=q_offs < dim)
            groups = tl.arange(0, BLOCK_D // 32)
            tl.store(dx_ptr + row * (dim // 32) + groups, dx, mask=groups < dim // 32)
            halves = tl.sum(tl.reshape(q, (BLOCK_D // 16, 16)), axis=1)                     # [BD / 16]
            runs = tl.arange(0, BLOCK_D // 16)
            tl.store(sums_ptr + row * (dim // 16) + runs, halves, mask=runs < dim // 16)


GATE_ACTIVATIONS = ("silu", "sigmoid")


def gated_rms_norm_ref(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float,
                       activation: str) -> torch.Tensor:
    """The Gated DeltaNet output norm (strata.model.norm.GatedRMSNorm): x [..., D] and gate [..., D] ->
    weight * x̂ (in the weight's and x's dtype) * act(gate) in float32, cast to x's dtype."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    x32 = weight * x32.to(x.dtype)
    act = torch.nn.functional.silu if activation == "silu" else torch.sigmoid
    return (x32 * act(gate.float())).to(x.dtype)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, gate_group: int, gate_group_stride: int,
                   weight: torch.Tensor, eps: float, activation: str, quantize: bool = False) -> torch.Tensor:
    """gated_rms_norm_ref over x [T, H, D] (each head's D values normalised) in one launch -> [T, H * D].
    The gate is read where the projection left it: head h's D values start at column
    (h // gate_group) * gate_group_stride + (h % gate_group) * D of gate's rows (gate [T, >= ...], unit
    column stride), so a z inside a fused projection output needs no copy. `quantize` (D a power of two, at
    least 32: see rounds_gated): the same launch rounds the output to 8 bits per 32 for the packed out_proj
    that reads it (q8_rounding.quantize's numbers, attached to the output)."""
    num_tokens, heads, dim = x.shape
    assert x.is_contiguous() and gate.stride(-1) == 1 and weight.is_contiguous() and activation in GATE_ACTIVATIONS
    assert not quantize or rounds_gated(dim)
    out = torch.empty(num_tokens, heads * dim, dtype=x.dtype, device=x.device)
    quantized = q8_rounding.empty_rounding(num_tokens, heads * dim, x.device) if quantize else None
    block_h = max(1, min(triton.next_power_of_2(heads), 4096 // triton.next_power_of_2(dim)))
    _gated_rms_norm_kernel[(num_tokens, triton.cdiv(heads, block_h))](
        x, gate, weight, out, *(quantized if quantized is not None else (out, out, out)), heads, dim, gate_group,
        gate_group_stride, eps, x.stride(0), gate.stride(0), SIGMOID=activation == "sigmoid", BLOCK_H=block_h,
        BLOCK_D=triton.next_power_of_2(dim), QUANTIZE=quantized is not None, num_warps=4, **pdl_options(x))
    if quantized is not None:
        q8_rounding.attach(out, quantized)
    return out


def rounds_gated(dim: int) -> bool:
    """Whether gated_rms_norm can round its output for packed weights: heads of a power-of-two width of at
    least 32 values, so a program's heads are whole blocks of 32 in the output row."""
    return dim >= 32 and dim & (dim - 1) == 0


if triton is not None:

    @triton.jit
    def _gated_rms_norm_kernel(x_ptr, gate_ptr, w_ptr, out_ptr, q_ptr, dx_ptr, sums_ptr, heads, dim, gate_group,
                               gate_group_stride, eps, stride_xt, stride_gt, SIGMOID: tl.constexpr,
                               BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, QUANTIZE: tl.constexpr,
                               USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        row = tl.program_id(0).to(tl.int64)
        offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, BLOCK_D)
        ok = (offs_h < heads)[:, None] & (offs_d < dim)[None, :]
        cols = offs_h[:, None] * dim + offs_d[None, :]                                       # [BH, BD]
        gate_cols = ((offs_h // gate_group) * gate_group_stride + (offs_h % gate_group) * dim)[:, None] + offs_d[None, :]
        x = tl.load(x_ptr + row * stride_xt + cols, mask=ok, other=0.0)
        gate = tl.load(gate_ptr + row * stride_gt + gate_cols, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs_d, mask=offs_d < dim, other=0.0)
        xf = x.to(tl.float32)
        normed = xf * tl.rsqrt(tl.sum(xf * xf, axis=1) / dim + eps)[:, None]
        # weight * x̂ rounds to the 16-bit dtype before the gate multiplies in float32 (the torch form)
        y = (w[None, :].to(tl.float32) * normed.to(x.dtype).to(tl.float32)).to(x.dtype).to(tl.float32)
        act = tl.sigmoid(gate) if SIGMOID else gate * tl.sigmoid(gate)
        y = (y * act).to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + row * heads * dim + cols, y, mask=ok)
        if QUANTIZE:  # q8_rounding's rounding of the values just stored: BLOCK_D == dim, so the program's heads
            # are the output columns first .. first + BLOCK_H * dim in order (masked heads are zeros)
            GROUPS: tl.constexpr = BLOCK_H * BLOCK_D // 32
            width = heads * dim
            first = tl.program_id(1) * BLOCK_H * BLOCK_D
            q, dx = round_blocks(tl.reshape(y.to(tl.float32), (GROUPS, 32)))                # [G, 32], [G]
            q_offs = first + tl.arange(0, GROUPS)[:, None] * 32 + tl.arange(0, 32)[None, :]
            tl.store(q_ptr + row * width + q_offs, q.to(tl.int8), mask=q_offs < width)
            blocks = first // 32 + tl.arange(0, GROUPS)
            tl.store(dx_ptr + row * (width // 32) + blocks, dx, mask=blocks < width // 32)
            halves = tl.sum(tl.reshape(q, (2 * GROUPS, 16)), axis=1)                        # [2G]
            runs = first // 16 + tl.arange(0, 2 * GROUPS)
            tl.store(sums_ptr + row * (width // 16) + runs, halves, mask=runs < width // 16)
