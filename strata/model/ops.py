"""The one place the model layers choose between a Triton kernel and its torch form, so the layers read
like their HF counterparts. `kernels_on(t)`: a CUDA tensor, Triton installed, not STRATA_NO_TRITON=1.

Ops with a self-contained torch form dispatch inside (rms_norm, rms_norm_topk_sum, linear, logits,
fused_moe, softmax_topk; packed_linear and packed_embedding over GGUF blocks, whose CPU kernel is C).
Kernel-only steps whose torch form is the layer's own code (paged attention of short windows, on CUDA
and, in C, on the CPU for a float32 pool; qk-norm + rotary + KV write, the GDN conv update and recurrence,
fused routing) come with the predicate that guards them. Each op keeps the kernel's limits (dtypes, shapes,
debug switches) here and changes no numerics: the same path runs in every case as before the ops existed.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from strata.config import debug_flag
from strata.kernels import (cpu_linear, hyper, packed_dequant, packed_gemv, packed_mmq, packed_q8, packed_q8_joined,
                            q8_rounding, qsa_scores, skinny_linear, skinny_mlp, triton_available)
from strata.kernels.fused_moe import fused_moe as fused_moe_kernel
from strata.kernels.fused_moe import fused_moe_ref, grouped_experts_apply
from strata.kernels.gguf_blocks import packed_matmul_ref
from strata.kernels.packed_moe import packed_moe as packed_moe_kernel
from strata.kernels.packed_moe import packed_moe_ref
from strata.kernels.ple import ple_gate as ple_gate_kernel
from strata.kernels.ple import ple_gate_ref
from strata.kernels.rms_norm import gated_rms_norm as gated_rms_norm_kernel
from strata.kernels.rms_norm import rms_norm as rms_norm_kernel
from strata.kernels.rms_norm import rms_norm_ref, rounds_gated, topk_sum_ref
from strata.kernels.rms_norm import rms_norm_topk_sum as rms_norm_topk_sum_kernel
from strata.kernels.routing import fused_routing_pays, softmax_topk_ref
from strata.kernels.routing import softmax_topk as softmax_topk_kernel

# Kernel-only steps, called by the layers as ops.<name> where the predicate beside them holds (their torch
# form is the layer's own code): fused routing (fused_routing_on), paged attention (paged_attention_on;
# cpu_paged_attention with cpu_paged_attention_on, and the rotary embedding + KV write cpu_rope_kv with
# cpu_rope_kv_on: strata.model.cpu_ops, the CPU path's native steps),
# qk-norm + rotary + KV write and the GDN short windows (kernels_on), the PLE layer's rows and conv (fused_ple_on,
# ple_conv_on), a table's rows gathered by the device from page-locked host memory (gather_rows).
from strata.kernels.fused_moe import default_config, moe_grouped_gemms  # noqa: F401
from strata.kernels.gdn import GroupedQKV, RawGates, causal_conv1d_update, gdn_recurrent  # noqa: F401
from strata.kernels.paged_attention import BlockChoice, epilogue_rounds, paged_attention  # noqa: F401
from strata.kernels.ple import ple_conv, ple_rows  # noqa: F401
from strata.kernels.rope_kv import qk_norm_rope_kv  # noqa: F401
from strata.kernels.sm_copy import gather_rows  # noqa: F401
from strata.kernels.routing import route_and_align  # noqa: F401
from strata.model import cpu_ops
from strata.model.cpu_ops import (cpu_causal_conv, cpu_conv_on, cpu_gdn_on, cpu_gdn_recurrent,  # noqa: F401
                                   cpu_paged_attention, cpu_paged_attention_on, cpu_rope_kv, cpu_rope_kv_on,
                                   exact_decode_is_slow)

HALF = (torch.bfloat16, torch.float16)
# kv_tile_for sizes the paged attention kernel's tiles for 16-bit and float32 heads of up to 256 dims
ATTENTION_MAX_HEAD_DIM = 256


def kernels_available() -> bool:
    """Whether the Triton kernels run at all (installed, not turned off by STRATA_NO_TRITON=1)."""
    return triton_available()


def native_cpu_rows(t: torch.Tensor) -> bool:
    """Whether `t` is float32 rows on the CPU: what the CPU path's native layer stack (model/cpu_stack.py) reads."""
    return t.is_cpu and t.dtype == torch.float32


def kernels_on(t: torch.Tensor) -> bool:
    """Whether ops on `t` take the Triton kernels: a CUDA tensor and kernels_available()."""
    return t.is_cuda and triton_available()


# ---- norms ----------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False,
             residual: torch.Tensor | None = None, for_packed: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """rms_norm_ref's contract: x [T, D] (+ residual) -> (normalised, x + residual or None); one launch on CUDA,
    torch's fused rms_norm for float32 on the CPU. `for_packed`: packed weights read the output next, so on
    CUDA the launch also rounds it to 8 bits for them where packed_q8 will read it (rounds_in_norm)."""
    if kernels_on(x):
        quantize = for_packed and packed_q8.rounds_in_norm(x.numel() // x.shape[-1], x.shape[-1])
        return rms_norm_kernel(x, weight, eps, zero_centered, residual, quantize)
    if x.is_cpu and x.dtype == torch.float32 and weight.dtype == torch.float32:
        return _rms_norm_float32(x, weight, eps, zero_centered, residual)
    return rms_norm_ref(x, weight, eps, zero_centered, residual)


def _rms_norm_float32(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
                      residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """rms_norm_ref on float32 rows in one torch call (F.rms_norm sums, scales and multiplies as the HF form
    does, so the bits are rms_norm_ref's: tests/model/test_cpu_ops.py), a few Python-dispatched ops fewer."""
    if residual is not None:
        x = x + residual
    if zero_centered:
        out = F.rms_norm(x, weight.shape, None, eps) * (1.0 + weight)
    else:
        out = F.rms_norm(x, weight.shape, weight, eps)
    return out, (x if residual is not None else None)


def rms_norm_topk_sum(partials: torch.Tensor, shared: torch.Tensor | None, weight: torch.Tensor, eps: float,
                      zero_centered: bool, residual: torch.Tensor | None, dtype: torch.dtype, for_packed: bool = False,
                      shared_gate: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """rms_norm of an MoE layer's top-k partials [T, K, D] summed (+ shared [T, D], times sigmoid(shared_gate
    [T, 1]) where given), with the residual add: one launch on CUDA, the sum (topk_sum_ref) then rms_norm
    otherwise. `for_packed` as in rms_norm."""
    if kernels_on(partials):
        quantize = for_packed and packed_q8.rounds_in_norm(partials.shape[0], partials.shape[-1])
        return rms_norm_topk_sum_kernel(partials, shared, weight, eps, zero_centered, residual, dtype, quantize,
                                        shared_gate)
    return rms_norm(topk_sum_ref(partials, shared, dtype, shared_gate), weight, eps, zero_centered, residual)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, gate_group: int, gate_group_stride: int,
                   weight: torch.Tensor, eps: float, activation: str, for_packed: bool = False) -> torch.Tensor:
    """The Gated DeltaNet short windows' output norm on CUDA (rms_norm.gated_rms_norm): x [T, H, D] -> [T, H * D].
    `for_packed`: a packed out_proj reads the output next, so the launch also rounds it to 8 bits for it
    where packed_q8 will read it (as rms_norm's for_packed)."""
    quantize = (for_packed and rounds_gated(x.shape[2])
                and packed_q8.rounds_in_norm(x.shape[0], x.shape[1] * x.shape[2]))
    return gated_rms_norm_kernel(x, gate, gate_group, gate_group_stride, weight, eps, activation, quantize)


# ---- dense projections ------------------------------------------------------------------------------

@functools.cache
def _skinny_enabled() -> bool:
    return triton_available() and not debug_flag("NO_SKINNY_LINEAR")


# one-row GEMVs take the skinny kernel below this many weight elements: it beat cuBLAS on every smaller
# hybrid shape and lost on the 12,288 x 2,048 (and larger) projections (H200, bench/results/
# 2026-12-02-h200-hybrid-gdn-fusion/linear_ab.log)
SKINNY_MAX_WEIGHT = 16 * 2**20


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear; one row of a 16-bit CUDA input in the weight's dtype takes skinny_linear (one launch where
    cuBLAS takes a split-K GEMV and a reduction) for weights under SKINNY_MAX_WEIGHT elements.
    STRATA_NO_SKINNY_LINEAR=1 turns it off."""
    if (x.is_cuda and x.dim() == 2 and x.shape[0] == 1 and x.dtype == weight.dtype and x.dtype in HALF
            and weight.is_contiguous() and weight.numel() < SKINNY_MAX_WEIGHT and _skinny_enabled()):
        # through the module: tests count the kernel's calls
        return skinny_linear.skinny_linear(x if x.stride(1) == 1 else x.contiguous(), weight, bias)
    return F.linear(x, weight, bias)


def row_wise_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """linear, where on the CPU each row of x [T, K] gets the same bits whatever rows come with it: torch's float
    GEMM blocks its sums by the row count (a router's logits moved ~1e-4 between 1 and 12 rows on the development
    VM), so a row's result would depend on the step's other rows. For the MoE routers, whose top-k turns such a
    difference into another expert: a token's experts are then the same in a decode step, a verification window
    and a batch. float32: strata.kernels.cpu_linear (sums in an order fixed by K); else one F.linear a row."""
    if x.is_cuda or x.dim() != 2:
        return linear(x, weight, bias)
    dense = x.contiguous()
    if cpu_linear.fits(dense, weight, bias) and cpu_linear.available():
        return cpu_linear.row_linear(dense, weight, bias)                                       # [T, N]
    if x.shape[0] <= 1:
        return linear(x, weight, bias)
    return torch.cat([F.linear(row, weight, bias) for row in x.split(1)])                     # [T, N]


def skinny_mlp_on(x: torch.Tensor, *weights) -> bool:
    """Whether a SwiGLU MLP (gate_up, down and an optional shared-expert gate: dense weights) on x takes
    skinny_mlp: one 16-bit CUDA row, weights of its dtype, contiguous, each under SKINNY_MAX_WEIGHT
    elements (where the skinny GEMV beat cuBLAS). STRATA_NO_SKINNY_LINEAR=1 turns it off too."""
    return (x.is_cuda and x.dim() == 2 and x.shape[0] == 1 and x.dtype in HALF and x.stride(1) == 1
            and all(isinstance(w, torch.Tensor) and w.dtype == x.dtype and w.is_contiguous()
                    and w.numel() < SKINNY_MAX_WEIGHT for w in weights) and _skinny_enabled())


def gated_mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
              gate: torch.Tensor | None = None) -> torch.Tensor:
    """skinny_mlp_ref's contract in two launches (skinny_mlp): call where skinny_mlp_on holds; through the
    module, so tests can count its calls."""
    return skinny_mlp.skinny_mlp(x, gate_up, down, gate)


def logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """hidden [N, D] -> float32 logits [N, V]. 16-bit weights on CUDA: the GEMM writes float32 itself (the
    logits are not rounded to 16 bits first, and no cast launch follows it on the decode path)."""
    if hidden.is_cuda and hidden.dim() == 2 and hidden.dtype in HALF and bias is None \
            and hidden.dtype == weight.dtype:
        return torch.mm(hidden, weight.t(), out_dtype=torch.float32)
    return F.linear(hidden, weight, bias).float()


# ---- packed GGUF weights (strata.model.packed) ------------------------------------------------------

def packed_linear(x: torch.Tensor, weight, bias: torch.Tensor | None = None,
                  out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [..., K] @ a PackedWeight [N, K], transposed (+ bias) -> [..., N] in `out_dtype` (x's by default),
    one row segment at a time. CPU: float32 models take the native dequant_matmul (each weight exactly
    gguf's float32 value, float32 sums: the numbers of the dense dequantized weight, up to summation order,
    so the bundled model's greedy chat stays HF transformers', tests/engine/test_engine.py); without it for
    some segment's type, the weight dequantized once (PackedWeight.dense_float32). 16-bit ones use the
    native int8-activation kernel (cpu_quant.quant_matmul, ~0.5 % of each output off) where it supports
    the segment's type, else packed_matmul_ref. CUDA: packed_q8 (x rounded to 8 bits per 32, integer dot
    products; x quantized once for every segment) for steps of the rows packed_q8.linear_takes (up to 8) of the
    types it reads (Q2_K-Q6_K, Q8_0, Q4_0/1, Q5_0/1, IQ4_NL, IQ4_XS, the i-quants; a weight's two segments of different
    types in one launch, packed_q8_joined, unless STRATA_NO_JOINED_GEMV=1), packed_mmq's linear_q8 (the same
    numbers on int8 tensor cores) for LM heads at 9-16 rows, packed_gemv for steps of up to GEMV_MAX_ROWS rows of
    the other types it reads, else dequantize to x's dtype (packed_dequant), then matmul."""
    if bias is None and x.dim() == 2 and not x.is_cuda and x.dtype == torch.float32 and out_dtype in (None, x.dtype):
        out = cpu_ops.float32_on_cpu(x, weight)  # the CPU decode path's every projection: no reshape, no cast
        return out.index_select(1, weight.output_order) if weight.reorders else out
    rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])  # [T, K] (x itself: what a norm attached stays)
    if rows.shape[0] == 0:  # the GPU kernels take at least one row (a tile of none does not compile)
        return x.new_empty(*x.shape[:-1], weight.shape[0], dtype=out_dtype or x.dtype)
    if not x.is_cuda and x.dtype == torch.float32:
        out = cpu_ops.float32_on_cpu(rows, weight)
    else:
        # straight into the final dtype where no bias follows (one less cast a projection)
        out = _packed_segments(rows, weight, torch.float32 if bias is not None else (out_dtype or x.dtype))
    if weight.reorders:  # rows kept in the file's order (PackedWeight.reordered): the columns gathered  [T, N]
        out = out.index_select(1, weight.output_order)
    if bias is not None:
        out = out + bias
    return out.to(out_dtype or x.dtype).reshape(*x.shape[:-1], out.shape[-1])


# packed_gemv rereads the weights per row: from 3 rows on, dequantizing to a temporary and the 16-bit GEMM
# are faster (H200, 5120 x 2048 Q4_K: 12.9 us a row against ~23 us for dequantize + GEMM at any row count)
GEMV_MAX_ROWS = 2


def _packed_segments(x: torch.Tensor, weight, dtype: torch.dtype) -> torch.Tensor:
    """x [T, K] @ a PackedWeight's row segments, transposed -> [T, N] (in `dtype` where the 8-bit kernels write the
    columns: each segment straight into its own, x quantized once for all; else float32 or x's dtype)."""
    k = weight.in_features
    segments = weight.segments()
    kernels = [_8_bit_kernel(x, qtype, blocks, k) for qtype, blocks in segments]   # asked once a segment
    if not any(kernels):
        outs = [_packed_segment(x, qtype, blocks, k) for qtype, blocks in segments]
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
    x = x.contiguous()
    quantized = q8_rounding.quantize(x)
    out = torch.empty(x.shape[0], sum(blocks.shape[0] for _, blocks in segments), dtype=dtype, device=x.device)
    if len(segments) == 2 and packed_q8_joined.enabled() and packed_q8_joined.joinable(segments, k, x.shape[0]):
        return packed_q8_joined.packed_gemv_q8_joined(x, segments, k, quantized=quantized, out=out)
    column = 0
    for (qtype, blocks), kernel in zip(segments, kernels):
        n = blocks.shape[0]
        if kernel is not None:
            kernel(x, blocks, qtype, n, k, quantized=quantized, out=out[:, column:column + n])
        else:
            out[:, column:column + n] = _packed_segment(x, qtype, blocks, k)
        column += n
    return out


def _8_bit_kernel(x: torch.Tensor, qtype: int, blocks: torch.Tensor, k: int):
    """The 8-bit-activation kernel that takes this segment of a CUDA step (packed_q8's GEMV, or packed_mmq's
    linear_q8 for LM heads at more rows), or None."""
    if not kernels_on(x):
        return None
    rows = x.shape[0]
    if packed_q8.gemv_takes(rows, qtype, blocks, k):
        return packed_q8.packed_gemv_q8
    if _mmq_takes(rows, qtype, blocks, k):
        return packed_mmq.linear_q8
    return None


def reads_8_bit_activations(qtype: int) -> bool:
    """Whether the 8-bit-activation kernels (packed_q8) read this block type (the rest take float activations)."""
    return qtype in packed_q8.UNIT


def _mmq_takes(rows: int, qtype: int, blocks: torch.Tensor, k: int) -> bool:
    return packed_q8.enabled() and blocks.stride(-1) == 1 and packed_mmq.linear_takes(qtype, k, blocks, rows)


def packed_linear_in_place(weight, rows: int) -> bool:
    """Whether packed_linear on CUDA reads a step of `rows` rows from the weight's blocks where they are (the
    8-bit or float GEMV kernels, packed_mmq's), not from a dequantized copy as large as the weight (more rows than
    they take)."""
    k = weight.in_features
    return all(packed_q8.gemv_takes(rows, qtype, blocks, k) or _mmq_takes(rows, qtype, blocks, k)
               or (rows <= GEMV_MAX_ROWS and packed_gemv.supports(qtype, k))
               for qtype, blocks in weight.segments())


def _packed_segment(x: torch.Tensor, qtype: int, blocks: torch.Tensor, k: int) -> torch.Tensor:
    """x [T, K] @ blocks [N, row_bytes] transposed -> [T, N] (float32, or x's dtype on CUDA for steps of
    more rows than packed_gemv takes: those dequantize, then multiply, until a prompt GEMM reads blocks)."""
    if x.is_cuda:
        if kernels_on(x) and x.shape[0] <= GEMV_MAX_ROWS and packed_gemv.supports(qtype, k):
            return packed_gemv.packed_gemv(x.contiguous(), blocks, qtype, blocks.shape[0], k)
        return F.linear(x, packed_dequant.dequantize(blocks, qtype, k, x.dtype))
    kernel = cpu_ops.native_quant()
    if kernel is not None and kernel.supports(qtype):
        return kernel.quant_matmul(x.float().contiguous(), blocks.contiguous(), qtype, blocks.shape[0], k)
    return packed_matmul_ref(x.float(), blocks, qtype, k)


def packed_embedding(weight, input_ids: torch.Tensor, dtype: torch.dtype, gather=None) -> torch.Tensor:
    """input_ids [T] -> rows [T, K] of a one-segment PackedWeight in `dtype`: the ids' block rows gathered (by
    `gather(ids)` where given: page_advice.RowReads), then dequantized; page-locked host blocks with the ids on the
    GPU are read in place (packed_dequant.dequantize_rows)."""
    if weight.reorders:
        input_ids = weight.output_order.index_select(0, input_ids)
    if weight.blocks.device != input_ids.device:
        return packed_dequant.dequantize_rows(weight.blocks, input_ids, weight.qtype, weight.in_features, dtype)
    rows = gather(input_ids) if gather else weight.blocks.index_select(0, input_ids)  # [T, row_bytes]
    return packed_dequant.dequantize(rows, weight.qtype, weight.in_features, dtype)


# ---- hyper-connections (Qwen4-Exp) -------------------------------------------------------------------

# the LM head's mixer takes the Triton kernels (in chunks of hyper.MAX_ROWS) up to this many rows; head graphs read
# no more (runner.cuda_graphs.HEAD_GRAPH_MAX_ROWS is this bound)
ROWS_ALIKE_MAX = 64


def hyper_mix(streams: torch.Tensor, norm_weight: torch.Tensor, down: torch.Tensor, up: torch.Tensor,
              inject: torch.Tensor | None, hc: int, eps: float,
              rows_alike: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hyper.hyper_mix_ref's contract: streams [T, hc * D] -> (block input [T, D], write weights [T, hc] or
    None); two Triton launches for decode rows on CUDA, the torch form otherwise (GEMMs for long steps).
    `rows_alike` (the LM head's mixer): a row rounds the same whichever rows come with it, up to ROWS_ALIKE_MAX
    rows, so a head graph over a layout's padded rows and an eager head over the rows sampled agree."""
    limit = ROWS_ALIKE_MAX if rows_alike else hyper.MAX_ROWS
    if (kernels_on(streams) and streams.shape[0] <= limit and streams.is_contiguous()
            and all(isinstance(w, torch.Tensor) and w.is_contiguous() for w in (down, up))):
        parts = [hyper.hyper_mix(rows, norm_weight, down, up, inject, hc, eps, rows_alike)
                 for rows in streams.split(hyper.MAX_ROWS)]
        x = parts[0][0] if len(parts) == 1 else torch.cat([x for x, _ in parts])
        weights = parts[0][1] if len(parts) == 1 or inject is None else torch.cat([w for _, w in parts])
        q8_rounding.keep_rounding(x)  # (a fresh block input: its packed readers share one rounding)
        return x, weights
    return hyper.hyper_mix_ref(streams, norm_weight, down, up, inject, hc, eps)


def inject(streams: torch.Tensor, output, weights: torch.Tensor) -> torch.Tensor:
    """hyper.inject_ref: a block's output [T, D] written into the streams [T, hc * D] with weights [T, hc]. An
    MoE block's unsummed output (moe.TopkPartials) is summed in the same launch on CUDA (topk_sum_inject)."""
    if not isinstance(output, torch.Tensor):
        if kernels_on(streams) and all(t is None or t.is_contiguous()
                                       for t in (output.partials, output.shared, streams, weights)):
            return hyper.topk_sum_inject(output.partials, output.shared, streams, weights, output.shared_gate)
        output = output.total()
    return hyper.inject_ref(streams, output, weights)


# ---- PLE (Qwen4-Exp's per-layer embedding) ---------------------------------------------------------

PLE_CONV_MAX_QUERY_LEN = 256  # (gated_delta_net.TRITON_MAX_QUERY_LEN: the same walk, measured for the GDN conv)


def fused_ple_on(streams: torch.Tensor) -> bool:
    """Whether the PLE layer takes kernels/ple.py's launches (its n-gram rows, its gate; the conv: ple_conv_on):
    CUDA rows of unit column stride, unless STRATA_NO_FUSED_PLE=1 (session 33 A/B on Qwen4-Exp 4L with PLE: 1,022
    tok/s against 828 for the torch form, tokens the same)."""
    return kernels_on(streams) and streams.stride(-1) == 1 and not debug_flag("NO_FUSED_PLE")


def ple_gate(keys: torch.Tensor, value: torch.Tensor, streams: torch.Tensor, key_weight: torch.Tensor,
             query_weight: torch.Tensor, conv_weight: torch.Tensor, hc: int,
             eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """kernels/ple.ple_gate_ref's contract -> (gated [T, hc * D], the conv's input [T, hc * D])."""
    if fused_ple_on(streams):
        return ple_gate_kernel(keys, value, streams, key_weight, query_weight, conv_weight, hc, eps)
    return ple_gate_ref(keys, value, streams, key_weight, query_weight, conv_weight, hc, eps)


def ple_conv_on(x: torch.Tensor, ctx) -> bool:
    """Whether the PLE conv takes kernels/ple.ple_conv: fused_ple_on, and windows of at most
    PLE_CONV_MAX_QUERY_LEN tokens (the kernel walks a window's tokens in order)."""
    return fused_ple_on(x) and ctx.max_query_len <= PLE_CONV_MAX_QUERY_LEN


# ---- MoE --------------------------------------------------------------------------------------------

def softmax_topk(logits: torch.Tensor, top_k: int, renormalize: bool, out_dtype: torch.dtype,
                 stats=None, layer_idx: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [T, E] -> (topk_ids [T, K] int64, topk_weights [T, K]): softmax, top-k, renormalise.
    `stats` (routing statistics or None) records layer `layer_idx`'s picks: in the kernel's own launch on
    CUDA (stats.layer_rows), by stats.record otherwise."""
    if kernels_on(logits):
        rows = stats.layer_rows(layer_idx) if stats is not None else (None, None, None)
        return softmax_topk_kernel(logits, top_k, renormalize, out_dtype, *rows)
    topk_ids, topk_weights = softmax_topk_ref(logits, top_k, renormalize, out_dtype)
    if stats is not None:
        stats.record(layer_idx, topk_ids)
    return topk_ids, topk_weights


def fused_moe(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
              topk_weights: torch.Tensor, may_skip: bool = False) -> torch.Tensor:
    """The grouped experts, fused_moe_ref's contract: the fused kernel on CUDA in 16-bit (tuned and tested
    for 16-bit weights; float32 takes the torch path). `may_skip`: negative ids mark pairs computed
    elsewhere (the kernel then sees id 0 with weight 0; no host sync)."""
    if kernels_on(hidden) and hidden.dtype in HALF:
        if may_skip:
            skipped = topk_ids < 0
            topk_ids, topk_weights = topk_ids.clamp(min=0), topk_weights.masked_fill(skipped, 0)
        return fused_moe_kernel(hidden, w13, w2, topk_ids, topk_weights)
    return fused_moe_ref(hidden, w13, w2, topk_ids, topk_weights)


def packed_moe(hidden: torch.Tensor, experts, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
               sum_topk: bool = True, int8: bool = False, longest_query: int = 0) -> torch.Tensor:
    """fused_moe over an ExpertBlocks (a layer's experts as GGUF blocks); negative ids are skipped.
    CUDA: the packed kernels (packed_moe; with sum_topk False, float32 partials [T, K or 1, D] for
    rms_norm_topk_sum). CPU float32: each used expert's projections by the native dequant_matmul (gguf's exact
    weights, float32 sums, as the dense layers: the same file loaded dense up to summation order; with `int8`,
    --cpu-matmul int8, cpu_quant.quant_moe: the activations rounded per block, the layer in one call); else (no C
    compiler, a type it lacks, STRATA_NO_CPU_DEQUANT=1, 16-bit) each used expert dequantized to hidden's dtype,
    then the dense torch path (packed_moe_ref: for float32 the bits of the same file loaded dense). longest_query:
    the step's longest query, which picks the CUDA kernels of a prompt (packed_moe.q8_pairs_per_expert)."""
    w13, qtype13, w2, qtype2 = experts
    if kernels_on(hidden) and hidden.dtype in HALF:
        return packed_moe_kernel(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights, sum_topk, longest_query)
    out = _packed_moe_cpu(hidden, experts, topk_ids, topk_weights, int8)
    if out is None:
        out = packed_moe_ref(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights)
    return out if sum_topk else out.float().unsqueeze(1)


def _packed_moe_cpu(hidden: torch.Tensor, experts, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                    int8: bool = False) -> torch.Tensor | None:
    """CPU float32: packed_moe_ref's grouped path with each used expert's two projections through the native
    dequant_matmul (gguf's exact weights, float32 sums in the kernel's order, as the dense layers) instead of a
    dequantized copy of the expert a step; with `int8`, the layer's pairs in one quant_moe call -> [T, D]; None
    where the kernel is off or does not read both types."""
    kernel = cpu_ops.native_dequant()
    w13, qtype13, w2, qtype2 = experts
    if kernel is None or hidden.is_cuda or hidden.dtype != torch.float32 or w13.is_cuda:
        return None
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    if int8 and kernel.supports_moe(qtype13, qtype2):
        pairs = (topk_ids >= 0).flatten().nonzero().squeeze(1)                 # [P] of the T * K flattened
        rows = (pairs // topk_ids.shape[1]).numpy()
        experts_of = topk_ids.flatten()[pairs].to(torch.int64).numpy()
        weights = topk_weights.flatten()[pairs].float().contiguous().numpy()
        out = torch.zeros_like(hidden)                                         # [T, D]
        kernel.quant_moe(hidden.contiguous(), rows, experts_of, weights, w13, qtype13, w2, qtype2, inter, out)
        return out
    if not (kernel.supports_dequant(qtype13) and kernel.supports_dequant(qtype2)):
        return None

    def mlp(x: torch.Tensor, e: int) -> torch.Tensor:
        gate_up = kernel.dequant_matmul(x.contiguous(), w13[e].contiguous(), qtype13, 2 * inter, dim)  # [n, 2I]
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]                                        # [n, I]
        return kernel.dequant_matmul(act, w2[e].contiguous(), qtype2, dim, inter)                    # [n, D]

    return grouped_experts_apply(hidden, topk_ids, topk_weights, mlp)


def fused_routing_on(hidden: torch.Tensor, gate_weight: torch.Tensor, w13: torch.Tensor) -> bool:
    """Whether a 16-bit CUDA step routes in one launch (route_and_align, then moe_grouped_gemms on the
    experts w13 [E, 2I, D], which must be on the device): where that measured faster (fused_routing_pays)."""
    return (kernels_on(hidden) and hidden.dtype in HALF and fused_routing_pays(hidden.shape[0], gate_weight.shape[0])
            and w13.is_cuda)


# ---- attention --------------------------------------------------------------------------------------

def attention_epilogue_on() -> bool:
    """Whether the attention kernel gates and rounds its own output (kernels/paged_attention.py's epilogue);
    STRATA_NO_ATTENTION_EPILOGUE=1 keeps the launches after it (to compare)."""
    return not debug_flag("NO_ATTENTION_EPILOGUE")


def attention_rounding(q: torch.Tensor, o_proj_weight) -> tuple | None:
    """Buffers for the attention kernel's 8-bit rounding of its output [T, H * D] (q [T, H, D]) where a packed o_proj
    (a PackedWeight: row segments) reads it through packed_q8 (every segment, this many rows) and the heads are
    whole blocks of 32; else None."""
    rows, width = q.shape[0], q.shape[1] * q.shape[2]
    if not (hasattr(o_proj_weight, "segments") and epilogue_rounds(q.shape[2]) and width % 128 == 0
            and all(packed_q8.gemv_takes(rows, qtype, blocks, width) for qtype, blocks in o_proj_weight.segments())):
        return None
    return q8_rounding.empty_rounding(rows, width, q.device)


def flat_attended(out: torch.Tensor, rounding: tuple | None) -> torch.Tensor:
    """The attention output [T, H, D] as o_proj's rows [T, H * D], with the kernel's rounding of them attached."""
    flat = out.reshape(out.shape[0], -1)
    if rounding is not None:
        q8_rounding.attach(flat, rounding)
    return flat


def paged_attention_on(q: torch.Tensor) -> bool:
    """Whether windows of at most 16 tokens of q [T, H, D] take the paged attention kernel."""
    return q.is_cuda and q.shape[-1] <= ATTENTION_MAX_HEAD_DIM and triton_available()


# ---- QSA (Qwen4-Exp's indexed attention) -----------------------------------------------------------

def qsa_block_scores(index_q: torch.Tensor, key_cache: torch.Tensor, block_tables: torch.Tensor,
                     seq_lens: torch.Tensor, query_start_loc: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                     cos: torch.Tensor, sin: torch.Tensor, rot_dim: int, ratio: int, top_blocks: int,
                     width: int, host: qsa_scores.HostKeys = None) -> torch.Tensor:
    """Each query row's scores of its sequence's complete blocks -> [T, width] float32 (-inf past them; a row
    within the budget unwritten): kernels/qsa_scores.py, whose kernel runs on CUDA with no host sync. host: the
    host KV tier's index keys (KV beyond VRAM)."""
    score = qsa_scores.qsa_block_scores if kernels_on(index_q) else qsa_scores.qsa_block_scores_ref
    return score(index_q, key_cache, block_tables, seq_lens, query_start_loc, norm_weight, eps, cos, sin, rot_dim,
                 ratio, top_blocks, width, host)
