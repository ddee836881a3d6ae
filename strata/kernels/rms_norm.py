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

from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel


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


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False,
             residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as rms_norm_ref, for rows with unit stride along D."""
    dim = x.shape[-1]
    x2 = x.reshape(-1, dim)
    assert x2.stride(1) == 1 and weight.is_contiguous()
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    new_residual = None
    if residual is not None:
        residual = residual.reshape(-1, dim)
        assert residual.stride(1) == 1
        new_residual = torch.empty_like(out)
    block_d = triton.next_power_of_2(dim)
    _rms_norm_kernel[(x2.shape[0],)](
        x2, residual if residual is not None else x2, weight, out, new_residual if new_residual is not None else out,
        dim, eps, x2.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
        HAS_RESIDUAL=residual is not None, ZERO_CENTERED=zero_centered, BLOCK_D=block_d,
        num_warps=min(16, max(1, block_d // 256)), **pdl_options(x))
    return out.view(x.shape), (new_residual.view(x.shape) if new_residual is not None else None)


if triton is not None:

    @triton.jit
    def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, dim, eps, stride_x, stride_r, stride_o,
                         HAS_RESIDUAL: tl.constexpr, ZERO_CENTERED: tl.constexpr, BLOCK_D: tl.constexpr,
                         USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK_D)
        ok = offs < dim
        x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
        if HAS_RESIDUAL:
            r = tl.load(res_ptr + row * stride_r + offs, mask=ok, other=0.0)
            x = (x.to(tl.float32) + r.to(tl.float32)).to(out_ptr.dtype.element_ty)
            tl.store(res_out_ptr + row * stride_o + offs, x, mask=ok)
        xf = x.to(tl.float32)
        normed = xf * tl.rsqrt(tl.sum(xf * xf, axis=0) / dim + eps)
        w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        if ZERO_CENTERED:
            y = normed * (1.0 + w)
        else:
            y = w * normed.to(out_ptr.dtype.element_ty).to(tl.float32)
        tl.store(out_ptr + row * stride_o + offs, y.to(out_ptr.dtype.element_ty), mask=ok)
