"""Attention over the paged KV cache, and the (optionally gated) attention layer built on it.

`paged_attention` attends each query to its sequence's cached prefix plus the causal part of its own
window (this step's K/V are already in the pool). Short windows (decode, 1 + k verification) run as
one batch: the Triton kernel on CUDA, the native kernel on the CPU for a float32 pool
(kernels/cpu_attention.py: K/V read in place), a padded torch batch otherwise; equal-length fresh prompts (a
multi-prompt graph's layout) run as one SDPA batch; other long prompt chunks run one sequence at a
time through torch SDPA so a single long chunk does not pad every other row. A mixed
step (prompt chunks beside verification windows) splits: its short windows still take one kernel
launch on CUDA. An int8 KV cache comes with its scales (`kv_scales`, the layer's pair at
kv_scale_key(layer) in ctx.kv_caches; None for other caches): written quantized, read dequantized.
With KV beyond VRAM (--kv-resident-tokens) a sequence's first blocks are in the host tier (`host_kv`,
ctx.host_block_ids): every path reads them there and the rest from the pool, in position order, so the
operands, and the result, are those of an all-resident run.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from strata.config import ModelConfig, kv_scale_key
from strata.kernels.kv_quant import read_kv_ref, write_kv_ref
from strata.model import cpu_sdpa, ops
from strata.model.context import ForwardContext
from strata.model.linear import Linear
from strata.model.norm import RMSNorm
from strata.model.rotary import RotaryEmbedding
from strata.transfer import consecutive_runs, index_tensor, raw

# windows (decode, verification) of at most this many tokens attend as one batch: the paged kernel on CUDA
BATCHED_MAX_QUERY_LEN = 16


KVScales = tuple[torch.Tensor, torch.Tensor] | None  # an int8 cache's (K, V) scales, [N_blocks, B, Hkv] each
# a layer's host tier (--kv-resident-tokens): (K [N_host, B, Hkv, D], V, their int8 scales or None)
HostKV = tuple[torch.Tensor, torch.Tensor, KVScales] | None
# one sequence's host part of one cache: (host cache, its scales or None, the sequence's host blocks [h] on the CPU)
HostPart = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor] | None


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor, kv_scales: KVScales = None) -> None:
    # k, v: [T, Hkv, D]; caches: [N_blocks, B, Hkv, D] (float8 caches: rounded to it; int8: quantized)
    for x, cache, scale in zip((k, v), (k_cache, v_cache), kv_scales or (None, None)):
        write_kv_ref(x, cache, scale, slot_mapping)


def _gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int, dtype: torch.dtype,
               cache_scale: torch.Tensor | None = None, host: HostPart = None) -> torch.Tensor:
    # cache: [N_blocks, B, Hkv, D], block_table: [..., nb] -> [..., length, Hkv, D] in `dtype` (a float8
    # cache's values widened, an int8 one's dequantized with cache_scale [N_blocks, B, Hkv])
    # index_select, not cache[block_table]: advanced indexing on a large pool is far slower on the CPU
    if host is not None:  # one sequence (block_table [nb]) whose first h blocks are in the host tier
        host_cache, host_scale, host_ids = host
        front_scale = None if host_scale is None else _host_blocks(host_scale, host_ids, cache.device)
        front = read_kv_ref(_host_blocks(host_cache, host_ids, cache.device), front_scale, dtype)  # [h, B, Hkv, D]
        back = _gather_kv(cache, block_table[host_ids.shape[0]:], length - front.shape[0] * cache.shape[1], dtype,
                          cache_scale)
        return torch.cat([front.flatten(0, 1), back])
    index = block_table.flatten()
    scales = None if cache_scale is None else cache_scale.index_select(0, index)    # [S * nb, B, Hkv]
    blocks = read_kv_ref(cache.index_select(0, index), scales, dtype)               # [S * nb, B, Hkv, D]
    flat = blocks.view(*block_table.shape[:-1], -1, *cache.shape[2:])
    return flat[..., :length, :, :]


def _host_blocks(host_cache: torch.Tensor, host_ids: torch.Tensor, device: torch.device) -> torch.Tensor:
    """host_cache[host_ids] ([h, ...], a sequence's blocks of the host tier) on `device`. To CUDA each run of
    consecutive blocks is one copy from the pinned tier (DMA at PCIe speed): an index_select would read
    every row with the CPU, and a long prompt's chunks read up to the whole tier of each layer."""
    if host_cache.device == device:
        return host_cache.index_select(0, host_ids.to(device))
    runs = consecutive_runs(host_ids.tolist())
    parts = [raw(host_cache)[start:start + count].to(device, non_blocking=True) for _, start, count in runs]
    return torch.cat(parts).view(host_cache.dtype)


def host_parts(ctx: ForwardContext, host_kv: HostKV, seq: int) -> tuple[HostPart, HostPart]:
    """Sequence `seq`'s host parts of a layer's K and V caches ((None, None): all on the device)."""
    if host_kv is None or not ctx.host_block_ids or not ctx.host_block_ids[seq]:
        return None, None
    ids = ctx.cached(("host_block_ids", seq), lambda: torch.tensor(ctx.host_block_ids[seq]))  # [h] CPU
    k, v, scales = host_kv
    k_scale, v_scale = scales or (None, None)
    return (k, k_scale, ids), (v, v_scale, ids)


def _kernel_host_tier(ctx: ForwardContext, host_kv: HostKV, rows: torch.Tensor | None = None) -> dict:
    """The paged attention kernel's host-tier arguments (of the sequences `rows`, default all): whenever the
    context carries the host tables, even with no host block this step (a CUDA graph's capture, whose
    replays may have some)."""
    if host_kv is None or ctx.host_block_tables is None:
        return {}
    tables, counts = ctx.host_block_tables, ctx.host_block_counts
    if rows is not None:
        tables, counts = tables[rows], counts[rows]
    return {"host_kv": host_kv, "host_block_tables": tables, "host_block_counts": counts}


def windows_take_kernel(q: torch.Tensor, ctx: ForwardContext) -> bool:
    """Whether the step is all short windows (decode, verification) that one paged attention kernel takes."""
    return ctx.max_query_len <= BATCHED_MAX_QUERY_LEN and ops.paged_attention_on(q)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    ctx: ForwardContext, scale: float, kv_scales: KVScales = None,
                    host_kv: HostKV = None, block_choice: ops.BlockChoice = None, gate: torch.Tensor | None = None,
                    rounding: tuple | None = None) -> torch.Tensor:
    """q: [T, H, D] (already rotated) -> [T, H, D]; K/V of this step must already be in the pool (or,
    for the first blocks of a sequence listed in ctx.host_block_ids, in the host tier `host_kv`).
    block_choice (QSA's, kernels/paged_attention.py), and the output epilogue (gate [T, H, D]: the output is
    out * sigmoid(gate); rounding: buffers for its 8-bit rounding): only where windows_take_kernel."""
    if windows_take_kernel(q, ctx):
        return ops.paged_attention(q, k_cache, v_cache, ctx.block_tables, ctx.seq_lens, ctx.query_start_loc, scale,
                                   max_query_len=ctx.max_query_len, table_width=ctx.split_table_width,
                                   kv_scales=kv_scales, block_choice=block_choice, gate=gate, rounding=rounding,
                                   **_kernel_host_tier(ctx, host_kv))
    assert block_choice is None and gate is None and rounding is None, \
        "a block choice or an output epilogue is for the paged attention kernel of short windows only"
    if ctx.max_query_len <= BATCHED_MAX_QUERY_LEN:
        if kv_scales is None and not ctx.has_host_blocks and ops.cpu_paged_attention_on(q, k_cache):
            context = ctx.cached("context_tokens", lambda: sum(ctx.num_computed) + sum(ctx.query_lens))
            return ops.cpu_paged_attention(q, k_cache, v_cache, ctx.block_tables, ctx.seq_lens, ctx.query_start_loc,
                                           scale, context)
        return _attend_batched(q, k_cache, v_cache, ctx, scale, kv_scales, host_kv)
    if not any(ctx.num_computed) and len(set(ctx.query_lens)) == 1:  # nothing computed: nothing in the host tier
        return _attend_fresh_prompts(q, k_cache, v_cache, ctx, scale, kv_scales)
    out = torch.empty_like(q)
    starts = [0, *itertools.accumulate(ctx.query_lens)]
    long_chunks = range(len(ctx.query_lens))
    if ops.paged_attention_on(q):
        short = [i for i, n in enumerate(ctx.query_lens) if n <= BATCHED_MAX_QUERY_LEN]
        if short:
            _attend_windows_triton(q, k_cache, v_cache, ctx, scale, short, starts, out, kv_scales, host_kv)
        long_chunks = [i for i, n in enumerate(ctx.query_lens) if n > BATCHED_MAX_QUERY_LEN]
    seq_lens = [c + n for c, n in zip(ctx.num_computed, ctx.query_lens)]
    block_size = k_cache.shape[1]
    k_scale, v_scale = kv_scales or (None, None)
    for i in long_chunks:
        q_len = ctx.query_lens[i]
        s, e = starts[i], starts[i + 1]
        num_blocks = -(-seq_lens[i] // block_size)
        table = ctx.block_tables[i, :num_blocks]
        host_k, host_v = host_parts(ctx, host_kv, i)
        # contiguous operands: the CPU SDPA kernel is many times slower on strided ones; a batch dim of
        # 1 because the fused CUDA kernels take 4-D inputs only (3-D falls back to the math kernel): [1, Hkv, L, D]
        k = _gather_kv(k_cache, table, seq_lens[i], q.dtype, k_scale, host_k).transpose(0, 1).contiguous()[None]
        v = _gather_kv(v_cache, table, seq_lens[i], q.dtype, v_scale, host_v).transpose(0, 1).contiguous()[None]
        chunk = q[s:e].transpose(0, 1).contiguous()[None]                                # [1, H, q_len, D]
        if ctx.num_computed[i] == 0:  # no cached prefix: plain causal attention, no mask to build or read
            with cpu_sdpa.attention_threads(chunk, seq_lens[i], causal=True):
                o = F.scaled_dot_product_attention(chunk, k, v, is_causal=True, scale=scale, enable_gqa=True)
        else:
            o = cpu_sdpa.attend_after_prefix(chunk, k, v, ctx.num_computed[i], scale)
        out[s:e] = o[0].transpose(0, 1)
    return out


def _attend_fresh_prompts(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          ctx: ForwardContext, scale: float, kv_scales: KVScales) -> torch.Tensor:
    """Fresh prompts (nothing cached) of equal length, one causal attention batch: q [S * L, H, D] ->
    [S * L, H, D]. A graph of several padded prompts has this layout, and so does an eager step of
    equal-length prompts; one batched call, where the general path runs one call per prompt."""
    num_seqs, q_len = ctx.num_seqs, ctx.query_lens[0]
    table = ctx.block_tables[:, : -(-q_len // k_cache.shape[1])]                             # [S, nb]
    k_scale, v_scale = kv_scales or (None, None)
    k = _gather_kv(k_cache, table, q_len, q.dtype, k_scale).transpose(1, 2).contiguous()     # [S, Hkv, L, D]
    v = _gather_kv(v_cache, table, q_len, q.dtype, v_scale).transpose(1, 2).contiguous()
    chunk = q.view(num_seqs, q_len, *q.shape[1:]).transpose(1, 2).contiguous()             # [S, H, L, D]
    with cpu_sdpa.attention_threads(chunk, q_len, causal=True):
        o = F.scaled_dot_product_attention(chunk, k, v, is_causal=True, scale=scale, enable_gqa=True)
    return o.transpose(1, 2).reshape(q.shape)


def _attend_windows_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ctx: ForwardContext,
                           scale: float, slots: list[int], starts: list[int], out: torch.Tensor,
                           kv_scales: KVScales, host_kv: HostKV) -> None:
    """The short windows `slots` of a mixed step in one Triton launch; writes their rows of out [T, H, D]."""
    lens = [ctx.query_lens[i] for i in slots]

    def layout():  # the same for every layer of the step: made (and copied to the device) once
        rows = [t for i in slots for t in range(starts[i], starts[i + 1])]
        return (index_tensor(rows, q.device), index_tensor(slots, q.device),                # [T_short], [S_short]
                index_tensor([0, *itertools.accumulate(lens)], q.device, ctx.query_start_loc.dtype))

    rows, chosen, query_start_loc = ctx.cached(("short_windows", tuple(slots)), layout)
    out[rows] = ops.paged_attention(q[rows], k_cache, v_cache, ctx.block_tables[chosen], ctx.seq_lens[chosen],
                                    query_start_loc, scale, max_query_len=max(lens), table_width=ctx.split_table_width,
                                    kv_scales=kv_scales, **_kernel_host_tier(ctx, host_kv, chosen))


def _attend_batched(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    ctx: ForwardContext, scale: float, kv_scales: KVScales, host_kv: HostKV = None) -> torch.Tensor:
    """Windows of at most 16 tokens as one padded SDPA batch: q [T, H, D] -> [T, H, D]."""
    num_seqs, max_q = ctx.num_seqs, ctx.max_query_len
    kv_index, row, col, mask, host_layout = ctx.cached(
        ("batched_attention", k_cache.shape[1], q.device), lambda: _batched_layout(ctx, k_cache.shape[1], q.shape[0],
                                                                                    q.device))
    k_scale, v_scale = kv_scales or (None, None)
    host_k = host_v = None
    if host_kv is not None and host_layout is not None:
        host_scale_k, host_scale_v = host_kv[2] or (None, None)
        host_k, host_v = (host_kv[0], host_scale_k, *host_layout), (host_kv[1], host_scale_v, *host_layout)
    k = _gather_tokens(k_cache, kv_index, num_seqs, q.dtype, k_scale, host_k)  # [S, Hkv, L, D]
    v = _gather_tokens(v_cache, kv_index, num_seqs, q.dtype, v_scale, host_v)
    if row is None:  # every window has max_q tokens: q already has the padded layout
        q_pad = q.view(num_seqs, max_q, *q.shape[1:])  # [S, Q, H, D]
    else:
        q_pad = q.new_zeros(num_seqs, max_q, *q.shape[1:])
        q_pad[row, col] = q
    # strided operands: on windows this short, SDPA gives the same bits on them as on contiguous
    # copies, and sooner than the copies take
    o = F.scaled_dot_product_attention(q_pad.transpose(1, 2), k, v, attn_mask=mask, scale=scale,
                                       enable_gqa=True).transpose(1, 2)  # [S, Q, H, D]
    return o.reshape(q.shape) if row is None else o[row, col]


def _gather_tokens(cache: torch.Tensor, kv_index: torch.Tensor, num_seqs: int, dtype: torch.dtype,
                   cache_scale: torch.Tensor | None, host=None) -> torch.Tensor:
    # cache: [N_blocks, B, Hkv, D], kv_index: [S * L] flat token slots -> [S, Hkv, L, D] in `dtype` (a
    # strided view; an int8 cache's rows dequantized with cache_scale [N_blocks, B, Hkv]). host: (host
    # cache, its scales, host token slots [S * L] on the CPU, in_host [S * L] bool): those rows from there
    row_scales = None if cache_scale is None else cache_scale.view(-1, cache.shape[2]).index_select(0, kv_index)
    rows = read_kv_ref(cache.view(-1, *cache.shape[2:]).index_select(0, kv_index), row_scales, dtype)  # [S * L, Hkv, D]
    if host is not None:
        host_cache, host_scale, host_index, in_host = host
        host_scales = None if host_scale is None else host_scale.view(-1, cache.shape[2]).index_select(0, host_index)
        host_rows = read_kv_ref(host_cache.view(-1, *cache.shape[2:]).index_select(0, host_index), host_scales, dtype)
        rows = torch.where(in_host[:, None, None], host_rows.to(rows.device), rows)
    return rows.view(num_seqs, -1, *cache.shape[2:]).transpose(1, 2)


def _batched_layout(ctx: ForwardContext, block_size: int, num_tokens: int, device: torch.device):
    """What _attend_batched needs of the step, the same for every layer (made once per forward): the flat
    KV slots of each sequence's first L = longest-context positions [S * L] (past a shorter context:
    slots of its padded table, masked), each token's (row, column) in the padded [S, max_q] query layout
    (None, None when every window is max_q long), the causal mask [S, 1, Q, L] (None for one sequence's
    single token, which sees every key) and, with host blocks, (host token slots [S * L] on the CPU,
    in_host [S * L]) (else None; kv_index is 0 at the host positions)."""
    num_seqs, max_q = ctx.num_seqs, ctx.max_query_len
    max_len = max(c + n for c, n in zip(ctx.num_computed, ctx.query_lens))
    positions = torch.arange(max_len, device=device)
    table = ctx.block_tables[:, : -(-max_len // block_size)]
    kv_index = (table[:, positions // block_size] * block_size + positions % block_size).flatten()
    host_layout = None
    if ctx.has_host_blocks:
        columns = positions // block_size
        in_host = (columns[None, :] < ctx.host_block_counts[:, None]).flatten()                 # [S * L]
        host_tables = ctx.host_block_tables[:, columns.clamp(max=ctx.host_block_tables.shape[1] - 1)]
        host_index = (host_tables * block_size + positions % block_size).flatten()
        host_layout = (host_index.where(in_host, 0).cpu(), in_host)
        kv_index = kv_index.where(~in_host, 0)
    query_lens = torch.tensor(ctx.query_lens, device=device)
    row = col = mask = None
    if num_tokens != num_seqs * max_q:
        row = torch.repeat_interleave(torch.arange(num_seqs, device=device), query_lens)
        col = torch.arange(num_tokens, device=device) - ctx.query_start_loc[row]
    if num_seqs > 1 or max_q > 1:
        q_pos = ctx.seq_lens[:, None] - query_lens[:, None] + torch.arange(max_q, device=device)[None, :]  # [S, Q]
        mask = (positions[None, None, :] <= q_pos[:, :, None])[:, None]  # [S, 1, Q, L]
    return kv_index, row, col, mask, host_layout


class Attention(nn.Module):
    """Full attention with fused QKV. `gated=True` is Qwen3-Next's per-head [q | gate] layout with
    sigmoid(gate) applied to the output; `qk_norm` adds RMSNorm over head_dim on q and k."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, gated: bool = False,
                 zero_centered_norm: bool = False) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.gated = gated
        self.q_size = self.num_heads * self.head_dim * (2 if gated else 1)
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.attention_bias)
        self.qkv_proj.shard_sizes = (self.q_size, self.kv_size, self.kv_size)  # checkpoint q/k/v_proj
        self.o_proj = Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=cfg.attention_bias)
        self.q_norm = self.k_norm = None
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, zero_centered_norm)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, zero_centered_norm)
        rot_dim = int(self.head_dim * cfg.partial_rotary_factor)
        self.rotary = RotaryEmbedding(self.head_dim, rot_dim, cfg.max_position_embeddings,
                                      cfg.rope_theta, cfg.rope_scaling)
        self.scale = self.head_dim ** -0.5

    def forward(self, hidden: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        q, gate = self.queries_after_kv_write(hidden, ctx)
        k_cache, v_cache, kv_scales = self.kv_cache(ctx)
        if ctx.kv_staging is not None:  # the host tier staged into a device ring: this layer's copy first
            ctx.kv_staging.before_attention(self.layer_idx)
        out = self.attend_to_output(q, gate, k_cache, v_cache, kv_scales, self.host_kv_cache(ctx), ctx)
        if ctx.kv_staging is not None:
            ctx.kv_staging.after_attention(self.layer_idx)
        return out

    def attend_to_output(self, q: torch.Tensor, gate: torch.Tensor | None, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, kv_scales: KVScales, host_kv: HostKV, ctx: ForwardContext,
                         block_choice: ops.BlockChoice = None) -> torch.Tensor:
        """paged_attention, then output(): rotated q [T, H, D] -> the layer's output [T, hidden]. Where the step's
        windows take the attention kernel, its launch also applies the output gate and rounds the result for a
        packed o_proj (ops.attention_rounding): the launches after attention come down to o_proj's."""
        if windows_take_kernel(q, ctx) and ops.attention_epilogue_on():
            rounding = ops.attention_rounding(q, self.o_proj.weight)
            if gate is not None or rounding is not None:
                out = paged_attention(q, k_cache, v_cache, ctx, self.scale, kv_scales, host_kv, block_choice, gate,
                                      rounding)
                return self.o_proj(ops.flat_attended(out, rounding))
        return self.output(paged_attention(q, k_cache, v_cache, ctx, self.scale, kv_scales, host_kv, block_choice),
                           gate)

    def kv_cache(self, ctx: ForwardContext) -> tuple[torch.Tensor, torch.Tensor, KVScales]:
        """This layer's (K cache, V cache, their scales when int8 else None) in the step's KV pool."""
        k_cache, v_cache = ctx.kv_caches[self.layer_idx]
        return k_cache, v_cache, ctx.kv_caches.get(kv_scale_key(self.layer_idx))

    def host_kv_cache(self, ctx: ForwardContext) -> HostKV:
        """This layer's host tier (K, V, scales) when the step's context carries one (eager steps: when some
        sequence has blocks there; CUDA graphs with a host tier: always), else None."""
        if ctx.host_kv_caches is None:
            return None
        k_cache, v_cache = ctx.host_kv_caches[self.layer_idx]
        return k_cache, v_cache, ctx.host_kv_caches.get(kv_scale_key(self.layer_idx))

    def queries_after_kv_write(self, hidden: torch.Tensor,
                               ctx: ForwardContext) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden [T, hidden] -> (rotated queries [T, H, D], output gate [T, H, D] or None); this step's
        keys and values are in the pool afterwards."""
        qkv = self.qkv_proj(hidden)  # [T, (H + 2 Hkv) * D] (the gate's H * D more when gated)
        k_cache, v_cache, kv_scales = self.kv_cache(ctx)
        # layers with equal rotary tables share the forward's cos / sin rows (the first one looks them up)
        step_rows = ctx.scratch.rope_rows.setdefault(self.rotary.config, {})
        if not (self.gated or self.q_norm is not None or ops.kernels_on(qkv)):
            return self._prepare_plain(qkv, k_cache, v_cache, kv_scales, ctx, step_rows), None
        num_tokens = qkv.shape[0]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        gate = None
        if self.gated:
            q, gate = q.view(num_tokens, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = q.reshape(num_tokens, self.num_heads, self.head_dim)   # [T, H, D]
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)   # [T, Hkv, D]
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        if ops.kernels_on(q):
            q = self._prepare_fused(q, k, v, k_cache, v_cache, kv_scales, ctx, step_rows)
        else:
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = self.rotary(ctx.positions, q, k, step_rows)
            write_kv(k, v, k_cache, v_cache, ctx.slot_mapping, kv_scales)
        return q, gate

    def _prepare_plain(self, qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, kv_scales: KVScales,
                       ctx: ForwardContext, step_rows: dict) -> torch.Tensor:
        """The torch path of a layer without output gate or qk-norm (Llama's): q and k are neighbours in
        qkv, so one rotation covers both -> rotated q [T, H, D]; rotated k and v are written to the pool. On
        the CPU with a float32 pool, one native call does it all (the same bits)."""
        if ops.cpu_rope_kv_on(qkv, k_cache, kv_scales):
            return ops.cpu_rope_kv(qkv, self.num_heads, self.num_kv_heads, self.head_dim,
                                   *self.rotary.rows(ctx.positions, step_rows), ctx.slot_mapping, k_cache, v_cache)
        num_tokens, heads, head_dim = qkv.shape[0], self.num_heads + self.num_kv_heads, self.head_dim
        qk = qkv[:, : heads * head_dim].view(num_tokens, heads, head_dim)       # [T, H + Hkv, D]
        qk = self.rotary.rotate(ctx.positions, qk, step_rows)
        v = qkv[:, heads * head_dim:].view(num_tokens, self.num_kv_heads, head_dim)  # [T, Hkv, D]
        write_kv(qk[:, self.num_heads:], v, k_cache, v_cache, ctx.slot_mapping, kv_scales)
        return qk[:, : self.num_heads]

    def output(self, attended: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        """attended [T, H, D] -> the layer's output [T, hidden] (sigmoid-gated when the layer is)."""
        out = attended.reshape(attended.shape[0], -1)  # [T, H * D]
        if gate is not None:
            out = out * torch.sigmoid(gate.reshape(out.shape))
        return self.o_proj(out)

    def _prepare_fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                       v_cache: torch.Tensor, kv_scales: KVScales, ctx: ForwardContext,
                       step_rows: dict) -> torch.Tensor:
        """qk-norm, rotary and the KV write in one Triton launch -> rotated q [T, H, D]."""
        norm = self.q_norm is not None
        return ops.qk_norm_rope_kv(q, k, v, self.q_norm.weight if norm else None,
                                   self.k_norm.weight if norm else None, self.q_norm.eps if norm else 0.0,
                                   norm and self.q_norm.zero_centered, self.rotary.cos, self.rotary.sin, ctx.positions,
                                   k_cache, v_cache, ctx.slot_mapping, step_rows, kv_scales)
