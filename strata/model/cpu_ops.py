"""The CPU path's native steps for float32 models (strata/kernels/cpu_quant.py, cpu_attention.py, cpu_gdn.py: C built
at first use): projections over packed GGUF blocks, paged attention of short windows over a float32 pool, a plain
attention layer's rotary embedding with its KV write, and the Gated DeltaNet recurrence on the state pool. Each
`native_*` answers the kernel module, or None where it is not built or a debug switch turns it off (the torch forms
then run, to compare); strata.model.ops dispatches here and re-exports what the layers call.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from strata.config import debug_flag


@functools.cache
def native_quant():
    """strata.kernels.cpu_quant (the native kernel on packed blocks) where it exists and is not turned off
    by STRATA_NO_CPU_QUANT=1, else None."""
    if debug_flag("NO_CPU_QUANT"):
        return None
    try:
        from strata.kernels import cpu_quant
    except ImportError:
        return None
    return cpu_quant


# Types of 256-value superblocks (the K-quants and i-quants; gguf_blocks' block_size): their exact float decode costs
# the CPU 1.7-5x int8's time at one row of x (session 60, the 2-core AVX2 Zen 2 VM: Q4_K 2.5-5.2x, Q6_K 2.4-4.2x,
# IQ4_XS 3.9-4.4x, IQ3_XXS 2.1x; the K-quants 1.1-2.2x at eight rows), where the 32-value block types' costs
# 0.9-1.4x at one row and 0.6-1.1x at eight (bench/results/2026-12-06-session60/cpu_kernels.txt)
SUPERBLOCK_VALUES = 256


def exact_decode_is_slow(qtype: int) -> bool:
    """Whether exact float products over weights of this GGUF type cost the CPU several times int8's (above):
    --cpu-matmul auto takes int8 for a model mostly of such weights (packed.resolve_cpu_matmul)."""
    from strata.kernels.gguf_blocks import block_format

    fmt = block_format(qtype)
    return fmt is not None and fmt.block_size == SUPERBLOCK_VALUES


@functools.cache
def native_dequant():
    """strata.kernels.cpu_quant for float32 inputs (dequant_matmul), else None: turned off with the int8
    kernel (STRATA_NO_CPU_QUANT=1) or alone (STRATA_NO_CPU_DEQUANT=1: float32 models then multiply by
    PackedWeight.dense_float32, torch's sums over the same weights, to compare)."""
    if debug_flag("NO_CPU_QUANT") or debug_flag("NO_CPU_DEQUANT"):
        return None
    from strata.kernels import cpu_quant

    return cpu_quant


def float32_on_cpu(x: torch.Tensor, weight) -> torch.Tensor:
    """x [T, K] float32 @ weight.T -> [T, N]: per segment, quant_matmul (int8 activations) where the
    weight asks for it (--cpu-matmul int8), else dequant_matmul; where the kernel does not handle every
    segment's type, the dense float32 copy of the weight."""
    kernel = native_dequant()
    if kernel is None or not all(kernel.supports_dequant(qtype) for qtype in weight.qtypes):
        return F.linear(x, weight.dense_float32())
    if not x.is_contiguous():
        x = x.contiguous()
    matmul = kernel.quant_matmul if weight.int8_activations else kernel.dequant_matmul
    # (a few hundred calls a token on a small model: each torch call saved is ~5 us of a ~100 us product)
    segments = weight.segments()
    if len(segments) == 1:
        qtype, blocks = segments[0]
        return matmul(x, blocks if blocks.is_contiguous() else blocks.contiguous(), qtype, blocks.shape[0],
                      weight.in_features)
    if not weight.int8_activations and len(segments) <= kernel.Segments.MAX and \
            all(blocks.is_contiguous() for _, blocks in segments):  # one library call for every segment
        if weight.cpu_segments is None:
            weight.cpu_segments = kernel.Segments(segments, weight.in_features)
        return kernel.dequant_matmul_segments(x, weight.cpu_segments)
    out = torch.from_numpy(np.empty((x.shape[0], sum(b.shape[0] for _, b in segments)), np.float32))  # [T, N]
    column = 0
    for qtype, blocks in segments:  # each segment's products straight into its columns (no concatenation)
        n = blocks.shape[0]
        matmul(x, blocks if blocks.is_contiguous() else blocks.contiguous(), qtype, n, weight.in_features,
               out=out[:, column:column + n])
        column += n
    return out


def cpu_paged_attention_on(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Whether short windows of q [T, H, D] over a float32 pool take the native CPU kernel
    (kernels/cpu_attention.py; STRATA_NO_CPU_ATTENTION=1: the torch batch, to compare)."""
    return q.is_cpu and q.dtype == k_cache.dtype == torch.float32 and native_attention() is not None


def cpu_paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                        seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float,
                        context_tokens: int) -> torch.Tensor:
    """cpu_attention.paged_attention (check cpu_paged_attention_on first): q [T, H, D] -> [T, H, D]."""
    return native_attention().paged_attention(q.contiguous(), k_cache, v_cache, block_tables, seq_lens,
                                            query_start_loc, scale, context_tokens)


def cpu_rope_kv_on(qkv: torch.Tensor, k_cache: torch.Tensor, kv_scales) -> bool:
    """Whether a plain attention layer's rotary embedding and KV write take the native CPU call (float32 rows and
    pool, no int8 scales; STRATA_NO_CPU_ATTENTION=1: the torch ops, to compare)."""
    return qkv.is_cpu and qkv.dtype == k_cache.dtype == torch.float32 and kv_scales is None and \
        native_attention() is not None


def cpu_rope_kv(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, cos_rows: torch.Tensor,
                sin_rows: torch.Tensor, slot_mapping: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> torch.Tensor:
    """cpu_attention.rope_kv (check cpu_rope_kv_on first): qkv [T, (H + 2 Hkv) * D] -> rotated q [T, H, D]."""
    return native_attention().rope_kv(qkv, heads, kv_heads, head_dim, cos_rows, sin_rows, slot_mapping, k_cache,
                                    v_cache)


@functools.cache
def native_attention():
    """strata.kernels.cpu_attention where its library is built here, else None."""
    if debug_flag("NO_CPU_ATTENTION"):
        return None
    from strata.kernels import cpu_attention

    return cpu_attention if cpu_attention.available() else None


@functools.cache
def native_stack():
    """strata.kernels.cpu_stack (a model's plain layers in one native call, model/cpu_stack.py) where its library is
    built here, else None."""
    from strata.kernels import cpu_stack

    return cpu_stack if cpu_stack.available() else None


def cpu_gdn_on(ssm_state: torch.Tensor) -> bool:
    """Whether a Gated DeltaNet layer's windows take the native CPU recurrence (kernels/cpu_gdn.py): a contiguous
    float32 state pool on the CPU (STRATA_TORCH_CPU_GDN=1: the torch path, to compare)."""
    return ssm_state.is_cpu and ssm_state.dtype == torch.float32 and ssm_state.is_contiguous() and \
        native_gdn() is not None


def cpu_gdn_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, beta: torch.Tensor,
                      pool: torch.Tensor, slots: torch.Tensor, begins: torch.Tensor, ends: torch.Tensor,
                      has_initial: torch.Tensor, out: torch.Tensor, all_states: torch.Tensor | None) -> None:
    """cpu_gdn.recurrent (check cpu_gdn_on first): its contract, out and all_states written in place."""
    native_gdn().recurrent(q, k, v, decay, beta, pool, slots, begins, ends, has_initial, out, all_states)


def cpu_conv_on(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor) -> bool:
    """Whether a causal conv of a step's windows takes the native CPU kernel (kernels/cpu_gdn.conv_windows): float32
    CPU tensors, a contiguous state pool and weight (STRATA_TORCH_CPU_GDN=1, or STRATA_TORCH_CPU_CONV=1 for the conv
    alone: the torch path, to compare)."""
    gdn = native_gdn()
    return gdn is not None and gdn.conv_available() and not debug_flag("TORCH_CPU_CONV") and x.is_cpu and \
        x.dtype == weight.dtype == conv_state.dtype == torch.float32 and x.stride(-1) == 1 and \
        weight.is_contiguous() and conv_state.is_contiguous() and conv_state.shape[2] <= 32


def cpu_causal_conv(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, slots: torch.Tensor,
                    begins: torch.Tensor, ends: torch.Tensor, has_initial: torch.Tensor, dilation: int,
                    keep_windows: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """cpu_gdn.conv_windows (check cpu_conv_on first): (out [T, C], the history after each token [T, C, H] or None)."""
    return native_gdn().conv_windows(x, weight, conv_state, slots, begins, ends, has_initial, dilation, keep_windows)


def native_gdn():
    """strata.kernels.cpu_gdn where its library is built here and STRATA_TORCH_CPU_GDN is not set, else None."""
    return None if debug_flag("TORCH_CPU_GDN") else _built_gdn()


@functools.cache
def _built_gdn():
    from strata.kernels import cpu_gdn

    return cpu_gdn if cpu_gdn.available() else None
