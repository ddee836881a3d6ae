"""The routed experts of one MoE layer over packed GGUF blocks (CUDA), and the torch path they are tested
against.

Weights: w13 uint8 [E, 2I, rb13] (rows of D values of type qtype13: gate rows, then up rows) and w2 uint8
[E, D, rb2] (rows of I values of type qtype2); an expert's rows are contiguous, experts may lie further
apart (w13.stride(0): device slots sized for the largest layer's experts). Pairs with a negative id are
skipped (computed elsewhere, or no expert: an expert provider's slot misses).

Two CUDA paths, picked per call by `packed_moe`:
- pairs (decode and verify steps, and anything inside a CUDA graph capture): one program per (pair, BLOCK_N
  rows of the expert) decodes the blocks in registers and multiplies on the CUDA cores
  (packed_gemv._chunk_dot), SiLU(gate) * up stored in hidden's dtype like the 16-bit kernel; then one
  program per (token, BLOCK_N output columns) sums its k experts' down projections, weighted, in float32.
  Each pair reads its expert's rows: a step whose pairs share experts rereads them (from L2 when small).
- dequantized (prompts: more than PAIR_MAX pairs): the used experts are dequantized to hidden's dtype
  and go through the 16-bit grouped GEMMs (fused_moe). One host sync (which experts are used).
Types the pairs kernel does not read (Q5_K, IQ4_XS, Q4_0, Q4_1; rows not a multiple of 256) always
take the dequantized path; inside a capture that path dequantizes every expert of the layer (no sync).
"""

from __future__ import annotations

import torch

from strata.kernels import packed_dequant, packed_gemv
from strata.kernels.fused_moe import fused_moe as fused_moe_kernel
from strata.kernels.fused_moe import grouped_experts_ref
from strata.kernels.gguf_blocks import dequantize_ref
from strata.kernels.launch import pdl_options

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: packed_moe_ref still works
    triton = tl = None

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.packed_gemv import _chunk_dot

# above this many (token, k) pairs outside a capture, dequantizing the used experts and running the 16-bit
# grouped GEMMs beats rereading each expert's blocks per pair
PAIR_MAX = 128
PAIR_CONFIG = dict(BLOCK_N=4, SUPERBLOCKS=4, num_warps=2, num_stages=3)


def dequantize_experts(w: torch.Tensor, qtype: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """w uint8 [E, N, row bytes] -> [E, N, K] in `dtype` (gguf's dequantization, then the cast; one launch on
    CUDA for the types packed_dequant reads)."""
    num, rows, _ = w.shape
    return packed_dequant.dequantize(w.reshape(num * rows, -1), qtype, k, dtype).view(num, rows, k)


def packed_moe_ref(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                   topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """The contract (module docstring): each used expert dequantized to hidden's dtype, then exactly the
    dense grouped path (fused_moe_ref) on those weights, so a float32 model gives the same bits as the
    same file loaded dense."""
    dim, inter = hidden.shape[1], w13.shape[1] // 2

    def weights_of(e: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (dequantize_ref(w13[e], qtype13, dim).to(hidden.dtype),
                dequantize_ref(w2[e], qtype2, inter).to(hidden.dtype))

    return grouped_experts_ref(hidden, topk_ids, topk_weights, weights_of)


def pairs_supported(qtype13: int, qtype2: int, dim: int, inter: int) -> bool:
    return packed_gemv.supports(qtype13, dim) and packed_gemv.supports(qtype2, inter)


def packed_moe(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
               topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """packed_moe_ref's contract on CUDA (float32 accumulation; the pairs path rounds SiLU(gate) * up to
    hidden's dtype as the 16-bit kernel does). hidden [T, D] -> [T, D] in hidden's dtype."""
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    capturing = torch.cuda.is_current_stream_capturing()
    if pairs_supported(qtype13, qtype2, dim, inter) and (capturing or topk_ids.numel() <= PAIR_MAX):
        return _pairs(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights)
    return _dequantized(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights, every_expert=capturing)


def _dequantized(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                 topk_ids: torch.Tensor, topk_weights: torch.Tensor, every_expert: bool) -> torch.Tensor:
    """The used experts (every one: no host sync) dequantized, then the 16-bit grouped GEMMs."""
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    num_experts = w13.shape[0]
    if every_expert:
        used = torch.arange(num_experts, device=hidden.device)
    else:
        used = topk_ids[topk_ids >= 0].unique()                            # [U] (a host sync)
    dense13 = dequantize_experts(w13.index_select(0, used), qtype13, dim, hidden.dtype)   # [U, 2I, D]
    dense2 = dequantize_experts(w2.index_select(0, used), qtype2, inter, hidden.dtype)    # [U, D, I]
    position = torch.full((num_experts + 1,), -1, dtype=torch.long, device=hidden.device)
    position[used] = torch.arange(used.numel(), device=hidden.device)
    local = position[topk_ids.clamp(min=-1)]                               # [T, K]; -1 (index E) stays -1
    skipped = local < 0
    return fused_moe_kernel(hidden, dense13, dense2, local.clamp(min=0), topk_weights.masked_fill(skipped, 0))


def _pairs(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
           topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    num_tokens, top_k = topk_ids.shape
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    assert hidden.stride(1) == 1 and w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == dim
    cfg = {**PAIR_CONFIG, **(config or {})}
    ids = topk_ids.reshape(-1).contiguous()                               # [P]
    weights = topk_weights.reshape(-1).contiguous()                       # [P]
    act = torch.empty(ids.numel(), inter, dtype=hidden.dtype, device=hidden.device)   # [P, I]
    out = torch.empty_like(hidden)                                        # [T, D]
    block_n = cfg["BLOCK_N"]
    _gate_up_pairs_kernel[(ids.numel(), triton.cdiv(inter, block_n))](
        hidden, w13, ids, act, inter, dim, top_k, hidden.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        QTYPE=qtype13, BLOCK_N=block_n, SB=_superblocks(cfg, dim), num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(hidden))
    _down_pairs_kernel[(num_tokens, triton.cdiv(dim, block_n))](
        act, w2, ids, weights, out, dim, inter, top_k, act.stride(0), w2.stride(0), w2.stride(1), out.stride(0),
        QTYPE=qtype2, BLOCK_N=block_n, SB=_superblocks(cfg, inter), num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(hidden))
    return out


def _superblocks(cfg: dict, k: int) -> int:
    """Superblocks per K step: the configured power of two, halved until it divides K's superblocks."""
    superblocks = cfg["SUPERBLOCKS"]
    while (k // packed_gemv.CHUNK) % superblocks:
        superblocks //= 2
    return superblocks


if triton is not None:

    @triton.jit
    def _gate_up_pairs_kernel(hidden_ptr, w13_ptr, ids_ptr, act_ptr, inter, dim, top_k, stride_ht, stride_we,
                              stride_wn, stride_ap, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr,
                              USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pair = tl.program_id(0)
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        if expert < 0:
            return
        token = pair // top_k
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = (offs_n < inter)[:, None, None, None]                                         # [BN, 1, 1, 1]
        gate_rows = w13_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn
        up_rows = gate_rows + inter * stride_wn
        r = tl.arange(0, 8)[None, None, :, None]
        l = tl.arange(0, 32)[None, None, None, :]
        x_offs = tl.arange(0, SB)[None, :, None, None] * 256 + r * 32 + l                     # [1, SB, 8, 32]
        acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for sb in tl.range(0, dim // 256, SB):
            x = tl.load(hidden_ptr + token * stride_ht + sb * 256 + x_offs).to(tl.float32)
            acc_g += _chunk_dot(gate_rows, sb, r, l, x, n_ok, QTYPE, SB, BLOCK_N)
            acc_u += _chunk_dot(up_rows, sb, r, l, x, n_ok, QTYPE, SB, BLOCK_N)
        act = acc_g * tl.sigmoid(acc_g) * acc_u
        tl.store(act_ptr + pair.to(tl.int64) * stride_ap + offs_n, act.to(act_ptr.dtype.element_ty),
                 mask=offs_n < inter)

    @triton.jit
    def _down_pairs_kernel(act_ptr, w2_ptr, ids_ptr, weights_ptr, out_ptr, dim, inter, top_k, stride_ap,
                           stride_we, stride_wn, stride_ot, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr,
                           SB: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        token = tl.program_id(0)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = (offs_n < dim)[:, None, None, None]
        r = tl.arange(0, 8)[None, None, :, None]
        l = tl.arange(0, 32)[None, None, None, :]
        x_offs = tl.arange(0, SB)[None, :, None, None] * 256 + r * 32 + l
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k in range(top_k):  # the token's pairs in order: a fixed float32 sum
            pair = token * top_k + k
            expert = tl.load(ids_ptr + pair).to(tl.int64)
            if expert >= 0:
                rows = w2_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn
                part = tl.zeros((BLOCK_N,), dtype=tl.float32)
                for sb in tl.range(0, inter // 256, SB):
                    x = tl.load(act_ptr + pair.to(tl.int64) * stride_ap + sb * 256 + x_offs).to(tl.float32)
                    part += _chunk_dot(rows, sb, r, l, x, n_ok, QTYPE, SB, BLOCK_N)
                acc += part * tl.load(weights_ptr + pair).to(tl.float32)
        tl.store(out_ptr + token.to(tl.int64) * stride_ot + offs_n, acc.to(out_ptr.dtype.element_ty),
                 mask=offs_n < dim)
