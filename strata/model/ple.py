"""Qwen4-Exp's PLE (per-layer embedding): hashed n-gram embeddings injected into every residual stream.

Each token's 2..N-gram (the token and up to N-1 before it, cut at an EOS: tokens of an earlier document
read as EOS) is hashed by `heads_per_ngram` multiplicative hashes into one table of rows; the rows
(`ngram_heads` of them, `ple_embed_dim` floats in all) project to one value and one key per stream, the
normed streams gate the value, and a dilated causal conv over the gated values adds local context.

Per-slot state, in the runner's recurrent-state pool under ("ple", layer): the conv history (the last
(K-1) * N gated values [hc * D, (K-1) * N], model dtype) and the n-gram context (the last N-1 token ids,
kept in the pool's float32 tensor: exact below 2^24). Both roll back like the Gated DeltaNet state.

The table stays in host memory (the real model's is ~320M rows), where a step gathers its few rows, unless
it fits on the GPU beside everything else (strata.weights.loader.place_host_tables): then the layer has no
host work. CUDA graphs take the layer either way: with the table in host memory a captured step ends its
graph after the row ids (copied to pinned memory) and, at each replay, the host gathers the rows and uploads
them for the next graph (strata.split_graphs), one short host wait a step instead of a step without graphs.
That is the fallback (STRATA_PLE_IN_PLACE=0, or too little free RAM for a copy of a table over a file's map): by
default a table left in host memory is page-locked there (a GGUF file's blocks copied off the file's map into memory
of their own first: locking the map itself ran for minutes) and the device gathers the rows itself over PCIe
(kernels/sm_copy.gather_rows; blocks dequantized as they are read, packed_dequant.dequantize_rows): no host work
and no split, so steps planned ahead stay ahead. Where the host reads a table kept as a file's blocks (CPU runs, the
fallback), it reads the map through page_advice.RowReads: random access, and a step's pages asked of the disk
together while they come from there.

The torch forms here (`ngram_rows`, the gate in kernels/ple.ple_gate_ref, `conv_and_add`) are ~140 small launches a
layer; on CUDA the rows, the gate and the conv are one launch each (kernels/ple.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import torch
import torch.nn.functional as F
from torch import nn

from strata import page_advice
from strata.config import ModelConfig
from strata.model import ops
from strata.model.context import ForwardContext
from strata.model.gated_delta_net import causal_conv1d_ragged, with_history
from strata.model.hyper import GroupRMSNorm
from strata.model.linear import Linear
from strata.model.packed import PackedWeight
from strata.split_graphs import capturing, split_here
from strata.transfer import HostCopy

_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment
_LAYER_SEED_STRIDE = 10007


# Set while a model is built from a source whose n-gram tables come as GGUF blocks (a PackedEmbedding replaces
# the table at load): the dense table is then only a shape (meta), never ~100 GB of host memory.
_TABLES_PACKED: contextvars.ContextVar[bool] = contextvars.ContextVar("ple_tables_packed", default=False)


@contextlib.contextmanager
def tables_packed(packed: bool):
    token = _TABLES_PACKED.set(packed)
    try:
        yield
    finally:
        _TABLES_PACKED.reset(token)


def state_key(layer_idx: int) -> tuple[str, int]:
    return ("ple", layer_idx)


def _splitmix64(x: int) -> int:
    x = (x + _GOLDEN_GAMMA) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def hash_multipliers(vocab_size: int, ngram_size: int, ple_index: int, seed: int) -> list[int]:
    """One odd multiplier per n-gram position, small enough that token * multiplier fits in int64."""
    half_bound = max(1, ((1 << 63) - 1) // max(vocab_size, 1) // 2)
    base = seed + _LAYER_SEED_STRIDE * ple_index
    return [2 * (_splitmix64((base + _GOLDEN_GAMMA * (i + 1)) & _MASK64) % half_bound) + 1 for i in range(ngram_size)]


def _is_prime(n: int) -> bool:
    return n == 2 or (n > 2 and n % 2 == 1 and all(n % d for d in range(3, math.isqrt(n) + 1, 2)))


def head_vocab_sizes(base: int, first_head: int, num_heads: int) -> list[int]:
    """Head h (global index first_head + h) hashes into the (first_head + h + 1)-th prime >= base."""
    primes, candidate = [], base - 1
    while len(primes) < first_head + num_heads:
        candidate += 1
        if _is_prime(candidate):
            primes.append(candidate)
    return primes[first_head:]


def ngram_rows(input_ids: torch.Tensor, context: torch.Tensor, ctx: ForwardContext, multipliers,
               sizes: torch.Tensor, offsets: torch.Tensor, eos: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """input_ids [T]; context [S_max, N-1] float32 (each slot's last N-1 tokens, read and updated); multipliers
    [N] (one per n-gram position: ints, or an int64 tensor on the ids' device); sizes, offsets
    [(N-1) * heads_per_ngram] (each head's prime and first row) -> (table rows [T, heads] int64, the context
    after each token [T, N-1] with ctx.keep_window_states, else None): the layer's torch form (a predecessor
    past an EOS reads as EOS; a slot without a context reads EOS); kernels/ple.ple_rows on CUDA."""
    ngram = len(multipliers)
    hist = ngram - 1
    before = context[ctx.state_slot_ids]                                                      # [S, N-1]
    before = torch.where(ctx.has_initial_state[:, None], before, float(eos))
    ext, token_pos, last_pos = with_history(input_ids.float()[:, None], before[:, :, None], ctx)
    context.index_copy_(0, ctx.state_slot_ids, ext[last_pos][..., 0])
    window_context = None
    if ctx.keep_window_states:
        after_each = token_pos[:, None] - hist + 1 + torch.arange(hist, device=input_ids.device)
        window_context = ext[after_each][..., 0]
    tokens = [input_ids.long()]
    for s in range(1, ngram):  # a predecessor past an EOS (exclusive) reads as EOS
        previous = ext[token_pos - s][:, 0].long()
        tokens.append(previous if s == 1 else torch.where(tokens[-1] == eos, eos, previous))
    per_ngram = sizes.shape[0] // hist
    rows = []
    for n in range(2, ngram + 1):
        mixed = tokens[0] * multipliers[0]
        for s in range(1, n):
            mixed = mixed ^ (tokens[s] * multipliers[s])
        heads = slice((n - 2) * per_ngram, (n - 1) * per_ngram)
        rows.append(mixed[:, None] % sizes[heads] + offsets[heads])
    return torch.cat(rows, dim=-1), window_context


def conv_and_add(x: torch.Tensor, gated: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
                 ctx: ForwardContext, dilation: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x [T, C] (the conv's input), gated [T, C], weight [C, K], conv_state [S_max, C, (K-1) * dilation] ->
    (gated + silu(conv) [T, C], the history after every token [T, C, H] or None): the layer's torch form;
    kernels/ple.ple_conv on CUDA."""
    conv, window = causal_conv1d_ragged(x, weight, conv_state, ctx, dilation)
    return gated + F.silu(conv), window


class NGramEmbedding(nn.Module):
    """token ids -> the concatenated rows of their n-gram hashes [T, ple_embed_dim]."""

    host_resident = True  # its table stays in host memory (the memory plan counts it there)

    def __init__(self, cfg: ModelConfig, ple_index: int) -> None:
        super().__init__()
        self.ngram_size, self.heads_per_ngram = cfg.ngram_size, cfg.heads_per_ngram
        self.eos = cfg.eos_token_ids[0]
        heads = cfg.ngram_heads
        sizes = head_vocab_sizes(cfg.ngram_vocab_size_base, ple_index * heads, heads)
        # per head: the prime it hashes modulo, and its first row in the table [ngram_heads] (device buffers)
        self.register_buffer("sizes", torch.tensor(sizes), persistent=False)
        self.register_buffer("offsets", torch.tensor([sum(sizes[:h]) for h in range(heads)]), persistent=False)
        rows = -(-sum(sizes) // cfg.ngram_vocab_size_multiple) * cfg.ngram_vocab_size_multiple
        multipliers = hash_multipliers(cfg.vocab_size, cfg.ngram_size, ple_index, cfg.ngram_seed)
        self.register_buffer("multipliers", torch.tensor(multipliers), persistent=False)  # [N] int64
        # host memory (but a shape-only model, the memory plan's, and a table that loads packed stay on meta)
        host = "meta" if torch.get_default_device().type == "meta" or _TABLES_PACKED.get() else "cpu"
        self.ngram_embedding = nn.Embedding(rows, cfg.ple_embed_dim // heads, device=host)
        self._ids = HostCopy()  # a CUDA step's row ids in host memory, for a table there
        # a table (dense, or a GGUF file's blocks) in page-locked host memory whose rows the device reads over PCIe
        # (weights.loader._pin_tables)
        self.read_in_place = False
        self._reads = None  # the host's reads of a table over a file's map (page_advice.RowReads), made at first use

    def forward(self, input_ids: torch.Tensor, context: torch.Tensor,
                ctx: ForwardContext) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids [T]; context [S_max, N-1] float32 (each slot's last N-1 tokens, read and updated) ->
        (embeddings [T, ple_embed_dim] in the table's dtype, on the ids' device; with ctx.keep_window_states
        the context after each token [T, N-1], for rollback, else None)."""
        if ops.fused_ple_on(input_ids):
            rows, window_context = ops.ple_rows(input_ids, context, ctx, self.multipliers, self.sizes,
                                                self.offsets, self.eos)                        # [T, heads]
        else:
            rows, window_context = ngram_rows(input_ids, context, ctx, self.multipliers, self.sizes, self.offsets,
                                              self.eos)
        # the table: an nn.Embedding in host memory, or on the GPU when it fits there (strata.weights.loader),
        # or a PackedEmbedding over a GGUF file's blocks, whose looked-up rows are dequantized
        table = self.ngram_embedding.weight                                                  # [R, E / heads]
        if table.device == rows.device:
            found = self._host_lookup(rows.flatten()) if rows.device.type == "cpu" else \
                self.ngram_embedding(rows.flatten())                                        # [T * heads, E / heads]
            return found.view(rows.shape[0], -1), window_context                            # [T, E]
        if self.read_in_place:  # (a CUDA run) the SMs read the rows over PCIe: no host work, no graph split
            if isinstance(table, PackedWeight):  # dequantized on the device as they are read
                found = self.ngram_embedding(rows.flatten())                                # [T * heads, E / heads]
            else:
                found = torch.empty(rows.numel(), table.shape[1], dtype=table.dtype, device=rows.device)
                ops.gather_rows(found, table.detach(), rows.flatten())
            return found.view(rows.shape[0], -1), window_context                            # [T, E]
        ids = self._ids.queue(rows)                                                           # [T * heads] host
        if capturing():
            return self._gathered_at_replay(ids, rows), window_context
        self._ids.wait(rows.device)
        found = self._host_lookup(ids)                                                        # [T * heads, E / heads]
        return found.view(rows.shape[0], -1).to(input_ids.device), window_context            # [T, E]

    def _host_lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [N] on the CPU -> the table's rows [N, E / heads], read by the host. A table kept as a GGUF file's
        blocks is read over the file's map, through page_advice.RowReads: the pages of its rows asked of the disk
        together while they come from there."""
        embedding = self.ngram_embedding
        if not isinstance(embedding.weight, PackedWeight):
            return embedding(ids)  # a dense table was read into memory (an HF checkpoint's, a random one)
        if self._reads is None:
            self._reads = page_advice.RowReads(embedding.weight.blocks)
        return ops.packed_embedding(embedding.weight, ids, embedding.dtype, gather=self._reads.gather)

    def _gathered_at_replay(self, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """While a step is captured: ids [T * heads], the copy of rows [T, heads] being made in host memory for
        a table there -> the device buffer [T, E] the graph after the split reads. At each replay the host waits
        for the ids, gathers the rows from the table and uploads them."""
        probe = self.ngram_embedding(torch.zeros(1, dtype=torch.long))                       # [1, E / heads]
        device = rows.device
        found = torch.empty(rows.shape[0], rows.shape[1] * probe.shape[-1], dtype=probe.dtype, device=device)

        def gather(num_real_rows: int) -> None:
            self._ids.wait(device)  # the ids have landed
            found.copy_(self._host_lookup(ids).view(found.shape))

        split_here(gather)
        return found


class PerLayerEmbedding(nn.Module):
    """(streams [T, hc * D], token ids [T]) -> what the layer adds to the streams [T, hc * D]."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, ple_index: int) -> None:
        super().__init__()
        self.key = state_key(layer_idx)
        self.hc, self.hidden = cfg.hc_count, cfg.hidden_size
        width, embed = cfg.hc_count * cfg.hidden_size, cfg.ple_embed_dim
        self.dilation = cfg.ngram_size
        self.history = (cfg.ple_conv_kernel_size - 1) * self.dilation
        self.ple_embedding = NGramEmbedding(cfg, ple_index)
        self.key_proj = Linear(embed, width, bias=False)
        self.value_proj = Linear(embed, cfg.hidden_size, bias=False)
        self.norm_key = GroupRMSNorm(width, cfg.hidden_size, cfg.rms_norm_eps)
        self.norm_query = GroupRMSNorm(width, cfg.hidden_size, cfg.rms_norm_eps)
        self.norm_conv = GroupRMSNorm(width, cfg.hidden_size, cfg.rms_norm_eps)
        # holds the checkpoint's conv1d.weight [C, 1, K]; applied by causal_conv1d_ragged with the dilation
        self.conv1d = nn.Conv1d(width, width, cfg.ple_conv_kernel_size, groups=width, bias=False)

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per-slot (conv history [hc * D, (K-1) * N], n-gram context [N-1]) shapes."""
        return (self.hc * self.hidden, self.history), (self.dilation - 1,)

    def forward(self, streams: torch.Tensor, input_ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        conv_state, context = ctx.state_caches[self.key]
        embeddings, window_context = self.ple_embedding(input_ids, context, ctx)
        embeddings = embeddings.to(streams.dtype)                                           # [T, E]
        keys, value = self.key_proj(embeddings), self.value_proj(embeddings)                # [T, hc * D], [T, D]
        # norm_key, norm_query, the gate, times the value (gated [T, hc * D]) and norm_conv (kernels/ple.py: one
        # launch on CUDA, the torch form elsewhere)
        gated, conv_input = ops.ple_gate(keys, value, streams, self.norm_key.weight, self.norm_query.weight,
                                         self.norm_conv.weight, self.hc, self.norm_key.eps)
        # gated + silu(conv) [T, hc * D]: kernels/ple.py's walk over each window on CUDA (up to
        # PLE_CONV_MAX_QUERY_LEN tokens a window), the torch form elsewhere
        conv = ops.ple_conv if ops.ple_conv_on(conv_input, ctx) else conv_and_add
        out, window_conv = conv(conv_input, gated, self.conv1d.weight[:, 0], conv_state, ctx, self.dilation)
        if ctx.keep_window_states:
            ctx.scratch.window_states[self.key] = (window_conv, window_context)
        return out
