"""Qwen4-Exp's QSA indexed attention: gated attention where each query reads only part of a long context.

An indexer (`indexer_n_heads` query heads and one key head of `indexer_head_dim`) scores the context in
blocks of `indexer_compress_ratio` tokens: a block's key is the mean of its tokens' raw index keys, normed
and rotated to the block's first position; its score is sum over heads of relu(q_h . key) / sqrt(dim).
A query attends to the tokens of its top `indexer_budget / ratio` complete blocks plus the tokens after
the last complete block; while it sees no more complete blocks than that, it attends densely.

The raw index keys are cached per token like K and V, in the KV pool under ("index", layer) as the pair
(keys [N_blocks, B, 1, dim], an empty [N_blocks, B, 1, 0]) so they are paged, reused and parked with the
layer's blocks; they stay in the model dtype when K and V are fp8 or int8.

Decode and verification windows on CUDA choose on the device (`QSAIndexer.choose_blocks`): a kernel scores
every row's complete blocks, torch.topk picks each row's top blocks, and the paged attention kernel reads
only those (and the tokens after the last complete block) for rows past the budget. No host decision, so a
CUDA graph runs such steps (Qwen4ExpForCausalLM.graph_variant names the variant). Elsewhere (the CPU,
prompt chunks of more than 16 tokens) sequences whose context has more blocks than the budget
run a masked attention here, one sequence at a time (`QSAIndexer.visible`, HF's math); the rest take the
layer's usual paged attention. With KV beyond VRAM both read a sequence's first blocks of index keys in the
host tier, as attention reads K and V there.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from strata.config import ModelConfig
from strata.model import cpu_sdpa, ops
from strata.model.attention import Attention, HostPart, _gather_kv, host_parts, paged_attention, windows_take_kernel
from strata.model.context import ForwardContext
from strata.model.linear import Linear
from strata.model.norm import RMSNorm


# the CUDA graph variant of steps in which some row reads a sparse context (ctx.graph_variant)
SPARSE_VARIANT = "qsa_sparse"


def index_cache_key(layer_idx: int) -> tuple[str, int]:
    return ("index", layer_idx)


def reads_sparse_context(cfg: ModelConfig, context_len: int) -> bool:
    """Whether a query seeing `context_len` tokens may skip some: more complete blocks than the budget."""
    return cfg.qsa and context_len // cfg.indexer_compress_ratio > \
        cfg.indexer_budget // cfg.indexer_compress_ratio


def choose_in_one_topk(scores: torch.Tensor, seen: torch.Tensor, complete: torch.Tensor, top_blocks: int) -> torch.Tensor:
    """scores [n, nb], seen [n, nb], complete [n] -> chosen [n, nb]: every seen block of a row within the budget,
    the top_blocks best seen ones of a row past it, in one top-k over rows whose unseen blocks score -inf (a long
    prompt chunk's rows see up to a chunk's worth of different counts: one top-k, not one per count and a host
    sync for the counts). Only an exact tie at the k-th score (relu zeroing every head of both blocks) may break
    otherwise than on per-count slices; on the CPU the per-count form keeps HF's own ties."""
    if scores.shape[1] <= top_blocks:
        return seen
    dense = (complete <= top_blocks)[:, None]
    top = scores.masked_fill(~seen, float("-inf")).topk(top_blocks, dim=1).indices          # [n, top_blocks]
    picked = torch.zeros_like(seen).scatter_(1, top, True)
    return seen & (dense | picked)


class QSAIndexer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.key = index_cache_key(layer_idx)
        self.config = cfg
        self.num_heads, self.head_dim = cfg.indexer_n_heads, cfg.indexer_head_dim
        self.ratio, self.top_blocks = cfg.indexer_compress_ratio, cfg.indexer_budget // cfg.indexer_compress_ratio
        self.index_qk_proj = Linear(cfg.hidden_size, (self.num_heads + 1) * self.head_dim, bias=False)
        self.index_qk_proj.row_invariant = True  # its scores pick blocks by top-k
        self.q_layernorm = RMSNorm(self.head_dim, cfg.rms_norm_eps, zero_centered=True)
        self.k_layernorm = RMSNorm(self.head_dim, cfg.rms_norm_eps, zero_centered=True)

    def is_sparse(self, context_len: int) -> bool:
        return reads_sparse_context(self.config, context_len)

    def queries_after_key_write(self, hidden: torch.Tensor, ctx: ForwardContext, rotary) -> torch.Tensor:
        """hidden [T, D] -> normed, rotated index queries [T, Hi, Di]; this step's raw keys go to the pool."""
        q, k = self.index_qk_proj(hidden).split([self.num_heads * self.head_dim, self.head_dim], dim=-1)
        keys = ctx.kv_caches[self.key][0]
        keys.view(-1, self.head_dim).index_copy_(0, ctx.slot_mapping, k)
        q = self.q_layernorm(q.reshape(hidden.shape[0], self.num_heads, self.head_dim))
        return rotary.rotate(ctx.positions, q)

    def choose_blocks(self, queries: torch.Tensor, ctx: ForwardContext, rotary) -> ops.BlockChoice:
        """Every row's blocks, on the device with no host decision: index queries [T, Hi, Di] -> (chosen [T, W]
        uint8, ratio, top_blocks), W the blocks ctx.block_tables can hold; a row within the budget reads densely
        whatever its row of `chosen` says. None when no row can be past the budget (W <= top_blocks). Eager
        steps of short windows choose here too, so a graph's step and its eager run choose alike (a graph's
        wider tables add -inf columns; only an exact tie at the k-th score could fall otherwise)."""
        keys = ctx.kv_caches[self.key][0]
        width = ctx.block_tables.shape[1] * keys.shape[1] // self.ratio
        if width <= self.top_blocks:
            return None
        host = None
        if ctx.host_kv_caches is not None and ctx.host_block_tables is not None:  # KV beyond VRAM
            host = (ctx.host_kv_caches[self.key][0], ctx.host_block_tables, ctx.host_block_counts)
        norm = self.k_layernorm
        scores = ops.qsa_block_scores(queries, keys, ctx.block_tables, ctx.seq_lens, ctx.query_start_loc, norm.weight,
                                      norm.eps, rotary.cos, rotary.sin, rotary.rot_dim, self.ratio, self.top_blocks,
                                      width, host)                                           # [T, W]
        top = scores.topk(self.top_blocks, dim=1).indices                                   # [T, top_blocks]
        chosen = torch.zeros(scores.shape, dtype=torch.uint8, device=scores.device).scatter_(1, top, 1)
        return chosen, self.ratio, self.top_blocks

    def visible(self, queries: torch.Tensor, first_pos: int, context_len: int, key_cache: torch.Tensor,
                block_table: torch.Tensor, rotary, host: HostPart = None) -> torch.Tensor:
        """One sequence's index queries [n, Hi, Di] at positions first_pos.. -> which of its context_len
        tokens each attends to [n, L] (causal included); key_cache [N_blocks, B, 1, Di] holds its raw keys
        (`host`: its first blocks' keys in the host tier, --kv-resident-tokens)."""
        device, ratio = queries.device, self.ratio
        raw = _gather_kv(key_cache, block_table, context_len, key_cache.dtype, host=host)[:, 0]              # [L, Di]
        num_blocks = context_len // ratio
        pooled = raw[: num_blocks * ratio].unflatten(0, (num_blocks, ratio)).float().mean(1).to(raw.dtype)
        starts = torch.arange(num_blocks, device=device) * ratio
        block_keys = rotary.rotate(starts, self.k_layernorm(pooled)[:, None])[:, 0]          # [nb, Di]
        scores = torch.einsum("qhd,bd->qhb", queries.float(), block_keys.float()).relu().sum(1)
        scores = scores / math.sqrt(self.head_dim)                                           # [n, nb]
        positions = first_pos + torch.arange(queries.shape[0], device=device)
        complete = (positions + 1) // ratio                                                  # [n] blocks seen
        blocks = torch.arange(num_blocks, device=device)
        seen = blocks[None] < complete[:, None]                                              # [n, nb]
        if ops.kernels_on(queries):
            chosen = choose_in_one_topk(scores, seen, complete, self.top_blocks)
        else:
            chosen = seen & (complete <= self.top_blocks)[:, None]                           # dense queries
            # relu leaves exact ties at 0, which topk breaks in its own order: it runs on exactly the rows HF's
            # reference gives it (the blocks a query has seen), so the choice on a CPU is the reference's
            for count in sorted({c for c in complete.tolist() if c > self.top_blocks}):
                rows = (complete == count).nonzero()[:, 0]
                top = scores[rows, :count].topk(self.top_blocks, dim=1).indices
                chosen[rows] = chosen[rows].scatter(1, top, True)
        tokens = torch.arange(context_len, device=device)
        in_blocks = tokens[None] < (complete * ratio)[:, None]                               # [n, L]
        picked = chosen[:, (tokens // ratio).clamp(max=max(num_blocks - 1, 0))]
        return (tokens[None] <= positions[:, None]) & (~in_blocks | picked)


class QSAAttention(Attention):
    """Gated attention (Qwen3-Next's) with the QSA indexer choosing each query's context."""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__(cfg, layer_idx, gated=True, zero_centered_norm=True)
        self.indexer = QSAIndexer(cfg, layer_idx)

    def forward(self, hidden: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        q, gate = self.queries_after_kv_write(hidden, ctx)
        index_q = self.indexer.queries_after_key_write(hidden, ctx, self.rotary)
        k_cache, v_cache, kv_scales = self.kv_cache(ctx)
        host_kv = self.host_kv_cache(ctx)
        sparse = [self.indexer.is_sparse(done + n) for done, n in zip(ctx.num_computed, ctx.query_lens)]
        if self._chooses_on_device(q, ctx, any(sparse)):
            choice = self.indexer.choose_blocks(index_q, ctx, self.rotary)
            return self.attend_to_output(q, gate, k_cache, v_cache, kv_scales, host_kv, ctx, choice)
        if not any(sparse):  # every row dense: the kernel's output epilogue as in plain attention
            return self.attend_to_output(q, gate, k_cache, v_cache, kv_scales, host_kv, ctx)
        out = paged_attention(q, k_cache, v_cache, ctx, self.scale, kv_scales, host_kv)
        start = 0
        for i, (done, n) in enumerate(zip(ctx.num_computed, ctx.query_lens)):
            if sparse[i]:
                out[start:start + n] = self._attend_selected(q[start:start + n], index_q[start:start + n], done,
                                                             done + n, i, ctx)
            start += n
        return self.output(out, gate)

    def _chooses_on_device(self, q: torch.Tensor, ctx: ForwardContext, any_sparse: bool) -> bool:
        """Whether the step's rows choose their blocks on the device: a graph captured as the sparse variant,
        or an eager step of short windows on CUDA where some row is past the budget (`any_sparse`)."""
        if ctx.graph_variant:
            return ctx.graph_variant == SPARSE_VARIANT
        return windows_take_kernel(q, ctx) and any_sparse

    def _attend_selected(self, q: torch.Tensor, index_q: torch.Tensor, done: int, context_len: int,
                         seq: int, ctx: ForwardContext) -> torch.Tensor:
        """Sequence `seq`'s queries [n, H, D] over the tokens the indexer picked for each -> [n, H, D]."""
        k_cache, v_cache, kv_scales = self.kv_cache(ctx)
        k_scale, v_scale = kv_scales or (None, None)
        table = ctx.block_tables[seq, : -(-context_len // k_cache.shape[1])]
        host_k, host_v = host_parts(ctx, self.host_kv_cache(ctx), seq)
        host_keys = None
        if host_k is not None:  # the index keys' host tier: (keys, no scales, the same host blocks)
            host_keys = (ctx.host_kv_caches[self.indexer.key][0], None, host_k[2])
        mask = self.indexer.visible(index_q, done, context_len, ctx.kv_caches[self.indexer.key][0], table,
                                    self.rotary, host_keys)                                          # [n, L]
        k = _gather_kv(k_cache, table, context_len, q.dtype, k_scale, host_k).transpose(0, 1)[None]  # [1, Hkv, L, D]
        v = _gather_kv(v_cache, table, context_len, q.dtype, v_scale, host_v).transpose(0, 1)[None]
        queries = q.transpose(0, 1)[None]                                                          # [1, H, n, D]
        with cpu_sdpa.attention_threads(queries, context_len, causal=False):  # a long chunk's: every core
            o = F.scaled_dot_product_attention(queries, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True)
        return o[0].transpose(0, 1)
