"""Attention input prep in one launch: per-head RMSNorm of q and k (Qwen3's qk-norm, optional), rotary
embedding of the first rot_dim dims (HF rotate-half layout), and the write of this step's k and v into
the paged KV pool (int8 caches: quantized there, their scales written beside them; kv_quant.py). One
program per (token, head) over the q heads then the KV heads; it replaces about thirty small launches of
the torch form per attention layer at decode sizes.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: the ref still works
    triton = tl = None

from strata.kernels.kv_quant import write_kv_ref
from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.kv_quant import quantize_int8
    from strata.kernels.launch import wait_for_previous_kernel


def rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [T, ..., D] rotated by positions [T] (cos / sin [P, R/2] for rot_dim R): HF's rotate_half on the first R
    dims in float32, cast back; the other dims as they are."""
    half = cos.shape[1]
    shape = (positions.shape[0],) + (1,) * (x.dim() - 2) + (half,)
    c, s = cos[positions].view(shape), sin[positions].view(shape)                      # [T, 1.., R/2]
    x1, x2 = x[..., :half].float(), x[..., half:2 * half].float()
    rotated = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)
    return torch.cat((rotated, x[..., 2 * half:]), dim=-1)


def qk_norm_rope_kv_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor | None,
                        k_weight: torch.Tensor | None, eps: float, zero_centered: bool, cos: torch.Tensor,
                        sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        slot_mapping: torch.Tensor, kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None
                        ) -> torch.Tensor:
    """q [T, H, D], k and v [T, Hkv, D]; q_weight / k_weight [D] or None (no qk-norm); cos / sin
    [P, R/2] for rot_dim R; caches [N_blocks, B, Hkv, D] -> rotated q [T, H, D]. Rotated k and v are
    written to the caches at slot_mapping [T] (write_kv_ref: int8 caches take their scales in kv_scales,
    the pair ([N_blocks, B, Hkv] float32) x2; None for other caches)."""
    from strata.kernels.rms_norm import rms_norm_ref

    if q_weight is not None:
        q = rms_norm_ref(q, q_weight, eps, zero_centered)[0]
        k = rms_norm_ref(k, k_weight, eps, zero_centered)[0]
    q, k = rope_ref(q, cos, sin, positions), rope_ref(k, cos, sin, positions)
    for x, cache, scale in zip((k, v), (k_cache, v_cache), kv_scales or (None, None)):
        write_kv_ref(x, cache, scale, slot_mapping)
    return q


def qk_norm_rope_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor | None,
                    k_weight: torch.Tensor | None, eps: float, zero_centered: bool, cos: torch.Tensor,
                    sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    slot_mapping: torch.Tensor, step_rows: dict | None = None,
                    kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Same contract as qk_norm_rope_kv_ref; q, k, v may be strided views (unit stride along D).
    `step_rows`: a dict kept for one forward and shared by the layers whose cos / sin tables are equal
    (ForwardContext.rope_rows). The forward's first launch stores the tokens' cos / sin rows there
    ([T, R/2] float32 each) as it looks them up by position; later launches read them straight, one
    dependent memory round trip fewer."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    assert q.stride(2) == 1 and k.stride(2) == 1 and v.stride(2) == 1 and k_cache.is_contiguous()
    assert cos.is_contiguous() and sin.is_contiguous() and v_cache.stride() == k_cache.stride()
    kv_int8 = kv_scales is not None
    assert not kv_int8 or all(s.is_contiguous() for s in kv_scales)
    k_scale, v_scale = kv_scales if kv_int8 else (k_cache, v_cache)  # unread without int8
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    has_norm = q_weight is not None
    half = cos.shape[1]
    gather = _NO_ROWS
    rows = step_rows.get("rows") if step_rows is not None else None
    if rows is not None:
        assert rows[0].shape == (num_tokens, half), "step_rows were made for another forward's tokens"
        gather = _READ_ROWS
    elif step_rows is not None:
        rows = step_rows["rows"] = tuple(torch.empty(num_tokens, half, dtype=torch.float32, device=q.device)
                                         for _ in range(2))
        gather = _WRITE_ROWS
    cos_rows, sin_rows = rows if rows is not None else (cos, sin)
    _qk_norm_rope_kv_kernel[(num_tokens, num_heads + num_kv_heads)](
        q, k, v, q_weight if has_norm else q, k_weight if has_norm else q, cos, sin, positions, k_cache, v_cache,
        k_scale, v_scale, slot_mapping, out, cos_rows, sin_rows, num_heads, head_dim, half, eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        HAS_NORM=has_norm, ZERO_CENTERED=zero_centered, GATHER=gather, KV_INT8=kv_int8,
        BLOCK_D=triton.next_power_of_2(head_dim), num_warps=1, **pdl_options(q))
    return out


# _qk_norm_rope_kv_kernel's GATHER: cos / sin looked up by position; also stored as the forward's rows;
# read from the forward's rows
_NO_ROWS, _WRITE_ROWS, _READ_ROWS = 0, 1, 2


if triton is not None:

    @triton.jit
    def _normed(x, w, scale, HAS_NORM: tl.constexpr, ZERO_CENTERED: tl.constexpr):
        """Head elements x (model dtype) after qk-norm (scale = rsqrt(mean(x^2) + eps); w the weight at the
        same dims, float32), in float32 holding the model-dtype value."""
        if HAS_NORM:
            normed = x.to(tl.float32) * scale
            if ZERO_CENTERED:
                x = (normed * (1.0 + w)).to(x.dtype)
            else:
                x = (w * normed.to(x.dtype).to(tl.float32)).to(x.dtype)
        return x.to(tl.float32)

    @triton.jit
    def _qk_norm_rope_kv_kernel(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, kc_ptr, vc_ptr,
                                ks_ptr, vs_ptr, slots_ptr, out_ptr, cos_rows_ptr, sin_rows_ptr, num_heads, head_dim,
                                half, eps,
                                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                                stride_ot, stride_oh,
                                HAS_NORM: tl.constexpr, ZERO_CENTERED: tl.constexpr, GATHER: tl.constexpr,
                                KV_INT8: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        token = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        is_q = head < num_heads
        kv_head = head - num_heads
        offs = tl.arange(0, BLOCK_D)
        ok = offs < head_dim
        # rotate-half partner of each rotated element: i < half pairs with i + half, else i - half
        rotated = offs < 2 * half
        partner = tl.where(offs < half, offs + half, offs - half)
        freq = tl.where(offs < half, offs, offs - half)
        if is_q:
            x_ptr = q_ptr + token * stride_qt + head * stride_qh
            w_ptr = qw_ptr
        else:
            x_ptr = k_ptr + token * stride_kt + kv_head * stride_kh
            w_ptr = kw_ptr
        # every load is issued up front: only cos / sin looked up by position wait on another, so two
        # memory round trips before the stores (one with the forward's rows)
        pos = tl.load(pos_ptr + token)
        slot = tl.load(slots_ptr + token).to(tl.int64)
        x = tl.load(x_ptr + offs, mask=ok, other=0.0)
        y = tl.load(x_ptr + partner, mask=ok & rotated, other=0.0)
        v = tl.load(v_ptr + token * stride_vt + kv_head * stride_vh + offs, mask=ok & (offs * 0 + head >= num_heads),
                    other=0.0)
        w, w_partner, scale = 1.0, 1.0, 1.0
        if HAS_NORM:
            w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
            w_partner = tl.load(w_ptr + partner, mask=ok & rotated, other=0.0).to(tl.float32)
        if GATHER == 2:  # _READ_ROWS
            c = tl.load(cos_rows_ptr + token * half + freq, mask=rotated, other=1.0)
            s = tl.load(sin_rows_ptr + token * half + freq, mask=rotated, other=0.0)
        else:
            c = tl.load(cos_ptr + pos * half + freq, mask=rotated, other=1.0)
            s = tl.load(sin_ptr + pos * half + freq, mask=rotated, other=0.0)
            if GATHER == 1:  # _WRITE_ROWS: one program per token stores them
                first = (offs < half) & (offs * 0 + head == 0)
                tl.store(cos_rows_ptr + token * half + offs, c, mask=first)
                tl.store(sin_rows_ptr + token * half + offs, s, mask=first)
        if HAS_NORM:
            xf = x.to(tl.float32)
            scale = tl.rsqrt(tl.sum(xf * xf, axis=0) / head_dim + eps)
        x = _normed(x, w, scale, HAS_NORM, ZERO_CENTERED)
        y = _normed(y, w_partner, scale, HAS_NORM, ZERO_CENTERED)
        out = tl.where(offs < half, x * c - y * s, x * c + y * s)
        out = tl.where(rotated, out, x).to(out_ptr.dtype.element_ty)
        if is_q:
            tl.store(out_ptr + token * stride_ot + head * stride_oh + offs, out, mask=ok)
        else:
            num_kv_heads = tl.num_programs(1) - num_heads
            vector = slot * num_kv_heads + kv_head
            if KV_INT8:  # the rotated k as the model dtype holds it, quantized (write_kv_ref's numbers)
                k8, k_scale = quantize_int8(out.to(tl.float32))
                v8, v_scale = quantize_int8(v.to(tl.float32))
                tl.store(kc_ptr + vector * head_dim + offs, k8, mask=ok)
                tl.store(vc_ptr + vector * head_dim + offs, v8, mask=ok)
                tl.store(ks_ptr + vector, k_scale)
                tl.store(vs_ptr + vector, v_scale)
            else:
                tl.store(kc_ptr + vector * head_dim + offs, out, mask=ok)
                tl.store(vc_ptr + vector * head_dim + offs, v, mask=ok)
