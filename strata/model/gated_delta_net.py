"""Gated DeltaNet (Qwen3-Next linear attention) over a ragged batch, with its state in the runner's pool.

Per sequence the layer reads (conv history, delta-rule state) from its row `state_slot_ids[i]` of
`ctx.state_caches[layer_idx]` (zeros when `has_initial_state[i]` is False) and writes the state after
its last token back in place. The delta rule comes in two plain-torch forms that must agree: a
token-by-token recurrence (short windows; can return the state after every position for speculative
rollback) and a chunked form (long prompt chunks; vectorised within a chunk). The state is float32.
"""

from __future__ import annotations

from itertools import accumulate

import torch
import torch.nn.functional as F
from torch import nn

from strata.config import ModelConfig, debug_flag
from strata.model import ops
from strata.model.context import ForwardContext
from strata.model.linear import Linear
from strata.model.norm import GatedRMSNorm
from strata.transfer import index_tensor

_RECURRENT_MAX_QUERY_LEN = 16
_CHUNK_SIZE = 64
# on CUDA, steps whose windows are all this short take the Triton kernels (a sequential loop over each
# window's tokens, all windows at once): prompt chunks too. A verification step keeps every token's state
# ([T, Hv, Dk, Dv] float32: too large for prompt rows), so its prompt chunks take a second recurrence that
# keeps none, where its windows come first (leading_windows; else the torch path). Also the longest prompt a
# CUDA graph takes for models with these layers (the kernels are its graph-safe path).
TRITON_MAX_QUERY_LEN = 256


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # x * rsqrt(|x|^2 + eps), the form of the FLA kernels the checkpoints were trained with
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def recurrent_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                               beta: torch.Tensor, initial_state: torch.Tensor,
                               return_all_states: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token gated delta rule, in float32.

    q, k: [B, L, H, Dk] (L2-normalised), v: [B, L, H, Dv], g (log decay, <= 0) and beta: [B, L, H],
    initial_state: [B, H, Dk, Dv]. Returns (out [B, L, H, Dv], final state [B, H, Dk, Dv]), or with
    `return_all_states` the state after every position [B, L, H, Dk, Dv] in place of the final state.
    """
    q = q.float() * q.shape[-1] ** -0.5
    k, v, g, beta = k.float(), v.float(), g.float(), beta.float()
    state = initial_state.float()
    outs, states = [], []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[..., None, None]
        predicted = torch.einsum("bhkv,bhk->bhv", state, k[:, t])          # [B, H, Dv]
        delta = (v[:, t] - predicted) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]          # [B, H, Dk, Dv]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
        if return_all_states:
            states.append(state)
    out = torch.stack(outs, dim=1)                                          # [B, L, H, Dv]
    return out, (torch.stack(states, dim=1) if return_all_states else state)


def chunked_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, initial_state: torch.Tensor,
                             chunk_size: int = _CHUNK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rule as `recurrent_gated_delta_rule` (same shapes, final state only), computed chunk by
    chunk: within a chunk the updates are solved at once (WY form, one unit-lower-triangular solve),
    then the state is carried to the next chunk. Zero padding (g = beta = 0) leaves the state as is."""
    batch, length, heads, _ = q.shape
    pad = (-length) % chunk_size

    def chunks(x: torch.Tensor) -> torch.Tensor:  # [B, L, H, X] -> [B, H, N, C, X]
        x = F.pad(x.float(), (0, 0, 0, 0, 0, pad))
        return x.transpose(1, 2).reshape(batch, heads, -1, chunk_size, x.shape[-1])

    q, k, v = chunks(q * q.shape[-1] ** -0.5), chunks(k), chunks(v)
    g, beta = chunks(g[..., None])[..., 0], chunks(beta[..., None])[..., 0]  # [B, H, N, C]
    log_decay = g.cumsum(dim=-1)                                             # log of decay since chunk start
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    # decay[t, s] = decay from position s to position t (s <= t), 0 above the diagonal
    decay = (log_decay[..., :, None] - log_decay[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    # Delta-rule corrections u solve (I + A) u = beta * (v - decayed S0^T k), A[t, s] = beta_t (k_t . k_s) decay[t, s]
    lower = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)   # [B, H, N, C, C]
    u_values = torch.linalg.solve_triangular(lower, beta[..., None] * v, upper=False, unitriangular=True)
    u_keys = torch.linalg.solve_triangular(lower, (beta * log_decay.exp())[..., None] * k,
                                           upper=False, unitriangular=True)
    attn = (q @ k.transpose(-1, -2)) * decay                                # [B, H, N, C, C]
    q_decayed = q * log_decay.exp()[..., None]
    k_to_end = k * (log_decay[..., -1:] - log_decay).exp()[..., None]        # keys decayed to chunk end
    state = initial_state.float()
    out = torch.empty_like(v)
    for n in range(q.shape[2]):
        u = u_values[:, :, n] - u_keys[:, :, n] @ state                      # [B, H, C, Dv]
        out[:, :, n] = q_decayed[:, :, n] @ state + attn[:, :, n] @ u
        state = state * log_decay[:, :, n, -1].exp()[..., None, None] + k_to_end[:, :, n].transpose(-1, -2) @ u
    out = out.reshape(batch, heads, -1, out.shape[-1])[:, :, :length]
    return out.transpose(1, 2), state


def with_history(x: torch.Tensor, history: torch.Tensor, ctx: ForwardContext) -> tuple[torch.Tensor, ...]:
    """Each sequence's H remembered rows followed by its tokens, in one tensor.

    x [T, ...] (this step's rows), history [S, H, ...] (each sequence's last H rows before them) ->
    ext [T + S * H, ...], token_pos [T] (row of each token in ext), last_pos [S, H] (rows of each sequence's
    last H rows after its last real token: its new history). ext[token_pos - j] is the row j steps before each token.
    """
    num_tokens, hist = x.shape[0], history.shape[1]
    device = x.device
    seq_ids = torch.arange(ctx.num_seqs, device=device)
    query_lens = ctx.cached("query_lens", lambda: index_tensor(ctx.query_lens, device))              # [S]
    seq_of_token = torch.repeat_interleave(seq_ids, query_lens, output_size=num_tokens)
    token_pos = torch.arange(num_tokens, device=device) + (seq_of_token + 1) * hist                  # [T]
    hist_pos = (ctx.query_start_loc[:-1] + seq_ids * hist)[:, None] + torch.arange(hist, device=device)  # [S, H]
    ext = x.new_empty(num_tokens + ctx.num_seqs * hist, *x.shape[1:])
    ext[hist_pos.flatten()] = history.reshape(-1, *x.shape[1:]).to(x.dtype)
    ext[token_pos] = x
    # a CUDA graph's fresh prompt is padded in place: its state ends after its real tokens
    ends = ctx.query_start_loc[1:] if ctx.real_query_lens is None else ctx.query_start_loc[:-1] + ctx.real_query_lens
    last_pos = (ends + seq_ids * hist)[:, None] + torch.arange(hist, device=device)
    return ext, token_pos, last_pos


def causal_conv1d_ragged(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
                         ctx: ForwardContext, dilation: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Depthwise causal conv of each sequence's tokens after its remembered inputs.

    x: [T, C], weight: [C, W], conv_state: [S_max, C, (W-1) * dilation] -> [T, C]; tap j reads the input
    (W-1-j) * dilation tokens back. Each sequence's last (W-1) * dilation inputs (history included, so
    short windows work) are written back to its row of conv_state. Also returns the conv state after every
    token [T, C, H] when ctx.keep_window_states, else None.
    """
    width, hist = weight.shape[1], conv_state.shape[2]
    assert hist == (width - 1) * dilation
    if ctx.real_query_lens is None and ops.cpu_conv_on(x, weight, conv_state):  # the same bits, in one pass
        slots, begins, ends, has = ctx.cached("native_conv", lambda: tuple(t.to(torch.int64).contiguous() for t in (
            ctx.state_slot_ids, ctx.query_start_loc[:-1], ctx.query_start_loc[1:], ctx.has_initial_state)))
        return ops.cpu_causal_conv(x, weight, conv_state, slots, begins, ends, has, dilation, ctx.keep_window_states)
    history = conv_state[ctx.state_slot_ids].transpose(1, 2)                                 # [S, H, C]
    history = torch.where(ctx.has_initial_state[:, None, None], history, 0)
    ext, token_pos, last_pos = with_history(x, history, ctx)
    out = sum(ext[token_pos - hist + j * dilation].float() * weight[:, j].float() for j in range(width))  # [T, C]
    conv_state.index_copy_(0, ctx.state_slot_ids, ext[last_pos].transpose(1, 2).to(conv_state.dtype))
    window_conv = None
    if ctx.keep_window_states:  # the conv state after each token: its last H inputs
        after_each = token_pos[:, None] - hist + 1 + torch.arange(hist, device=x.device)         # [T, H]
        window_conv = ext[after_each].transpose(1, 2).to(conv_state.dtype)                       # [T, C, H]
    return out.to(x.dtype), window_conv


class GatedDeltaNet(nn.Module):
    """in_proj -> causal conv + SiLU -> L2-normed q/k -> gated delta rule -> gated RMSNorm -> out_proj.

    The fused input projections come in two row layouts: Qwen3-Next's checkpoint tensors in_proj_qkvz /
    in_proj_ba group their rows per key head (`grouped_qkvz`); Qwen3.5 and Qwen4-Exp checkpoints have four
    tensors (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a), loaded as the shards of plain [q | k | v | z]
    and [b | a] (`shard_sizes`). `gate_activation`: the output gate of the norm (silu, or sigmoid)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, grouped_qkvz: bool = True,
                 gate_activation: str = "silu") -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.grouped_qkvz = grouped_qkvz
        self.num_k_heads, self.num_v_heads = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.v_heads_tiled = cfg.linear_value_heads_tiled
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.kernel_size = cfg.linear_conv_kernel_dim
        self.in_proj_qkvz = Linear(cfg.hidden_size, 2 * self.key_dim + 2 * self.value_dim, bias=False)
        self.in_proj_ba = Linear(cfg.hidden_size, 2 * self.num_v_heads, bias=False)
        if not grouped_qkvz:
            self.in_proj_qkvz.shard_sizes = (self.conv_dim, self.value_dim)
            self.in_proj_ba.shard_sizes = (self.num_v_heads, self.num_v_heads)
        # holds the checkpoint's conv1d.weight [C, 1, W]; applied by causal_conv1d_ragged, not by nn.Conv1d
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel_size, groups=self.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.empty(self.num_v_heads))
        self.A_log = nn.Parameter(torch.empty(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, cfg.rms_norm_eps, gate_activation)
        self.out_proj = Linear(self.value_dim, cfg.hidden_size, bias=False)

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per-slot (conv state, delta-rule state) shapes."""
        return (self.conv_dim, self.kernel_size - 1), (self.num_v_heads, self.head_k_dim, self.head_v_dim)

    def forward(self, hidden: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        limit = _RECURRENT_MAX_QUERY_LEN if ctx.keep_window_states else TRITON_MAX_QUERY_LEN
        if ops.kernels_on(hidden) and ctx.max_query_len <= limit:
            return self._forward_short_windows(hidden, ctx)
        if ops.kernels_on(hidden) and ctx.max_query_len <= TRITON_MAX_QUERY_LEN and not debug_flag("TORCH_MIXED_GDN"):
            # once a step for all layers; STRATA_TORCH_MIXED_GDN=1: such steps on the torch path (session 54's)
            windows = ctx.cached(("leading_windows",), lambda: leading_windows(ctx))
            if windows is not None:
                return self._forward_short_windows(hidden, ctx, windows)
        num_tokens = hidden.shape[0]
        mixed_qkv, z, b, a = self._project(hidden)
        conv_state, ssm_state = ctx.state_caches[self.layer_idx]
        mixed_qkv, window_conv = causal_conv1d_ragged(mixed_qkv, self.conv1d.weight[:, 0], conv_state, ctx)
        mixed_qkv = F.silu(mixed_qkv)
        q, k, v = mixed_qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = self._per_value_head(l2norm(q.reshape(num_tokens, self.num_k_heads, self.head_k_dim).float()))
        k = self._per_value_head(l2norm(k.reshape(num_tokens, self.num_k_heads, self.head_k_dim).float()))
        v = v.reshape(num_tokens, self.num_v_heads, self.head_v_dim)          # [T, Hv, Dv]
        beta = b.float().sigmoid()                                              # [T, Hv]
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        core, window_ssm = self._delta_rule(q, k, v, g, beta, ssm_state, ctx)  # [T, Hv, Dv]
        if ctx.keep_window_states:
            ctx.scratch.window_states[self.layer_idx] = (window_conv, window_ssm)
        core = core.to(hidden.dtype)
        return self.out_proj(self.norm(core, z).reshape(num_tokens, self.value_dim))

    def _forward_short_windows(self, hidden: torch.Tensor, ctx: ForwardContext, windows: int | None = None
                               ) -> torch.Tensor:
        """Decode and verification windows (and prompt chunks up to TRITON_MAX_QUERY_LEN) on CUDA: the
        Triton conv-update and recurrent kernels read and write the pool rows directly (no host-side
        layout work, so the step can be a CUDA graph). Five launches between the projections: the conv
        reads q, k, v where the projection put them, the recurrence finishes the L2 norms and gates
        itself, and the gated norm reads z in place. `windows` (an eager step of verification windows and
        longer prompt chunks, leading_windows): the recurrence runs twice, keeping the per-token states of
        the first `windows` sequences only (those of a prompt chunk would take [T, Hv, Dk, Dv] float32), so
        such a step computes with the kernels the same step's graphs and plain prompts use."""
        num_tokens = hidden.shape[0]
        qkvz = self.in_proj_qkvz(hidden)                                      # [T, 2 key_dim + 2 value_dim]
        ba = self.in_proj_ba(hidden)                                          # [T, 2 Hv]
        conv_state, ssm_state = ctx.state_caches[self.layer_idx]
        conv_out, ssm_out = (ctx.scratch.window_buffers or {}).get(self.layer_idx, (None, None))
        if windows is not None:  # the conv's states cover every row, more than a graph's buffer holds
            conv_out = None
        group = self.num_v_heads // self.num_k_heads
        grouped = ops.GroupedQKV(self.key_dim, self.head_k_dim, group * self.head_v_dim) if self.grouped_qkvz else None
        mixed_qkv, window_conv = ops.causal_conv1d_update(
            qkvz, self.conv1d.weight[:, 0], conv_state, ctx.state_slot_ids, ctx.query_start_loc,
            ctx.has_initial_state, keep_window_states=ctx.keep_window_states, silu=True, window_out=conv_out,
            real_lens=ctx.real_query_lens, grouped=grouped)                   # [T, conv_dim]: plain [q | k | v]
        q, k, v = mixed_qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.view(num_tokens, self.num_k_heads, self.head_k_dim)                      # [T, Hk, Dk], not normed
        k = k.view(num_tokens, self.num_k_heads, self.head_k_dim)
        v = v.view(num_tokens, self.num_v_heads, self.head_v_dim)                      # [T, Hv, Dv]
        # b's columns start at ba's first; a's and z's where the layout puts them (RawGates, gated_rms_norm)
        if self.grouped_qkvz:  # per key head: [b (g) | a (g)] in ba, z after q, k and v in qkvz
            a, raw = ba[:, group:], ops.RawGates(self.A_log, self.dt_bias, group, 2 * group)
            z = qkvz[:, 2 * self.head_k_dim + group * self.head_v_dim:]
            z_group, z_group_stride = group, qkvz.shape[1] // self.num_k_heads
        else:  # [b | a] and [q | k | v | z]
            a, raw = ba[:, self.num_v_heads:], ops.RawGates(self.A_log, self.dt_bias, self.num_v_heads, 0)
            z, z_group, z_group_stride = qkvz[:, self.conv_dim:], self.num_v_heads, 0
        if windows is None:
            core, window_ssm = ops.gdn_recurrent(q, k, v, a, ba, ssm_state, ctx.state_slot_ids, ctx.query_start_loc,
                                                 ctx.has_initial_state, keep_all_states=ctx.keep_window_states,
                                                 all_states_out=ssm_out, real_lens=ctx.real_query_lens, raw=raw,
                                                 tiled=self.v_heads_tiled)    # [T, Hv, Dv]
        else:
            core, window_ssm = self._recurrence_in_two(q, k, v, a, ba, ssm_state, ctx, windows, raw, ssm_out)
        if ctx.keep_window_states:
            ctx.scratch.window_states[self.layer_idx] = (window_conv, window_ssm)
        normed = ops.gated_rms_norm(core, z, z_group, z_group_stride, self.norm.weight, self.norm.eps,
                                    self.norm.activation_name, self.norm.feeds_packed)  # [T, value_dim]
        return self.out_proj(normed)

    def _recurrence_in_two(self, q, k, v, a, ba, ssm_state: torch.Tensor, ctx: ForwardContext, windows: int,
                           raw, ssm_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The recurrence of a step whose first `windows` sequences keep their per-token states and whose others
        (prompt chunks) do not -> (core [T, Hv, Dv], states [T_w, Hv, Dk, Dv] of the windows' rows, the first T_w),
        those in `ssm_out` (a graph's persistent buffer of per-token states) where it holds them."""
        window_rows = sum(ctx.query_lens[:windows])
        core = v.new_empty(v.shape)                                                        # [T, Hv, Dv]
        if ssm_out is not None and ssm_out.shape[0] >= window_rows:
            kept = ssm_out[:window_rows]                                                   # [T_w, Hv, Dk, Dv]
        else:
            kept = ssm_state.new_empty(window_rows, *ssm_state.shape[1:])
        real = ctx.real_query_lens
        for part, keep in ((slice(0, windows), True), (slice(windows, None), False)):
            starts = ctx.query_start_loc[part.start:(part.stop + 1 if part.stop is not None else None)]
            ops.gdn_recurrent(q, k, v, a, ba, ssm_state, ctx.state_slot_ids[part], starts, ctx.has_initial_state[part],
                              keep_all_states=keep, all_states_out=kept if keep else None,
                              real_lens=None if real is None else real[part], raw=raw, tiled=self.v_heads_tiled,
                              out=core)
        return core, kept

    def _per_value_head(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, Hk, Dk] -> [T, Hv, Dk], the key head each value head reads (grouped or tiled)."""
        group = self.num_v_heads // self.num_k_heads
        return x.repeat(1, group, 1) if self.v_heads_tiled else x.repeat_interleave(group, 1)

    def _project(self, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """hidden [T, D] -> (mixed_qkv [T, conv_dim], z [T, Hv, Dv], b [T, Hv], a [T, Hv])."""
        num_tokens, group = hidden.shape[0], self.num_v_heads // self.num_k_heads
        if not self.grouped_qkvz:
            mixed_qkv, z = self.in_proj_qkvz(hidden).split([self.conv_dim, self.value_dim], dim=-1)
            b, a = self.in_proj_ba(hidden).split([self.num_v_heads, self.num_v_heads], dim=-1)
            return mixed_qkv, z.reshape(num_tokens, self.num_v_heads, self.head_v_dim), b, a
        # rows grouped per key head: [q | k | v (group heads) | z (group heads)] and [b | a]
        qkvz = self.in_proj_qkvz(hidden).view(num_tokens, self.num_k_heads, -1)
        q, k, v, z = qkvz.split([self.head_k_dim, self.head_k_dim, group * self.head_v_dim,
                                 group * self.head_v_dim], dim=-1)
        b, a = self.in_proj_ba(hidden).view(num_tokens, self.num_k_heads, 2 * group).split([group, group], dim=-1)
        mixed_qkv = torch.cat([x.reshape(num_tokens, -1) for x in (q, k, v)], dim=-1)  # [T, conv_dim]
        z = z.reshape(num_tokens, self.num_v_heads, self.head_v_dim)
        return mixed_qkv, z, b.reshape(num_tokens, self.num_v_heads), a.reshape(num_tokens, self.num_v_heads)

    def _delta_rule(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                    beta: torch.Tensor, ssm_state: torch.Tensor,
                    ctx: ForwardContext) -> tuple[torch.Tensor, torch.Tensor | None]:
        """On the CPU every window runs token by token in one native call (ops.cpu_gdn_recurrent: faster than the
        chunked torch form at every length measured, a 512-token prompt 49-51 against 137-147 ms a layer on the
        2-core VM), unless STRATA_TORCH_CPU_GDN=1.
        Else short windows run as one padded recurrent batch; long windows (prompt chunks) run chunked,
        batched with others of similar length (`_similar_lengths`), so one long prompt chunk does not
        pad every decode row and a step of many prompts is not a loop over them. With
        ctx.keep_window_states the recurrent batch also returns the state after every token
        ([T, Hv, Dk, Dv]; rows of long windows stay unset: verification windows are always short; on the native path
        only the leading windows' [T_w, Hv, Dk, Dv] where prompt chunks follow them, leading_windows)."""
        out = v.new_empty(v.shape, dtype=torch.float32)                        # [T, Hv, Dv]
        short = [i for i, n in enumerate(ctx.query_lens) if n <= _RECURRENT_MAX_QUERY_LEN]
        long = [i for i, n in enumerate(ctx.query_lens) if n > _RECURRENT_MAX_QUERY_LEN]
        starts = [0, *accumulate(ctx.query_lens)]
        kept_rows, native = q.shape[0], ops.cpu_gdn_on(ssm_state)
        if native:
            # windows ahead of the prompt chunks keep only their own rows' states, as the CUDA kernels do: a
            # 512-token chunk's would take 1 GB a layer at Qwen3-Next's 32 x 128 x 128
            windows = ctx.cached(("leading_windows",), lambda: leading_windows(ctx))
            kept_rows = starts[windows] if windows is not None else kept_rows
        window_ssm = None
        if ctx.keep_window_states:
            window_ssm = ssm_state.new_empty(kept_rows, *ssm_state.shape[1:])  # [T or T_w, Hv, Dk, Dv]
        if native:
            parts = [(short, window_ssm), (long, None)] if window_ssm is not None else [(short + long, None)]
            inputs = ((q.float() * q.shape[-1] ** -0.5).contiguous(), k.float().contiguous(),  # as the torch rule
                      v.float().contiguous(), g.float().exp().contiguous(), beta.float().contiguous())
            for seqs, kept in parts:
                if seqs:
                    self._native_recurrence(inputs, ssm_state, ctx, seqs, starts, out, kept)
            return out, window_ssm
        groups = [(short, recurrent_gated_delta_rule)] if short else []
        groups += [(seqs, chunked_gated_delta_rule) for seqs in _similar_lengths(long, ctx.query_lens)]
        initial = torch.where(ctx.has_initial_state[:, None, None, None], ssm_state[ctx.state_slot_ids], 0)
        for seqs, rule in groups:
            tokens, row, col, seq_index, last = ctx.cached(
                ("delta_rule_layout", tuple(seqs)), lambda: _padded_layout(seqs, starts, ctx.query_lens, q.device))
            max_len = max(ctx.query_lens[i] for i in seqs)
            padded = [_pad(x[tokens], row, col, len(seqs), max_len) for x in (q, k, v, g, beta)]
            if window_ssm is not None and rule is recurrent_gated_delta_rule:
                group_out, all_states = rule(*padded, initial[seq_index], return_all_states=True)
                window_ssm[tokens] = all_states[row, col]
                final = all_states[torch.arange(len(seqs), device=q.device), last]
            else:
                group_out, final = rule(*padded, initial[seq_index])
            out[tokens] = group_out[row, col]
            ssm_state.index_copy_(0, ctx.state_slot_ids[seq_index], final)
        return out, window_ssm

    def _native_recurrence(self, inputs: tuple[torch.Tensor, ...], ssm_state: torch.Tensor, ctx: ForwardContext,
                           seqs: list[int], starts: list[int], out: torch.Tensor,
                           window_ssm: torch.Tensor | None) -> None:
        """The recurrence of the windows `seqs` on the CPU in one native call (ops.cpu_gdn_recurrent), their states
        read and written in place in ssm_state; out [T, Hv, Dv] and window_ssm (if any) written at their tokens.
        inputs: (q scaled by Dk^-1/2, k, v, exp(g), beta), contiguous float32, every token's."""
        slots, begins, ends, has = ctx.cached(("native_delta_rule", tuple(seqs)), lambda: (
            ctx.state_slot_ids[seqs].to(torch.int64), torch.tensor([starts[i] for i in seqs]),
            torch.tensor([starts[i + 1] for i in seqs]), ctx.has_initial_state[seqs].to(torch.int64)))
        ops.cpu_gdn_recurrent(*inputs, ssm_state, slots, begins, ends, has, out, window_ssm)


def leading_windows(ctx: ForwardContext) -> int | None:
    """A verification step's sequences whose per-token states are kept (the short ones, as the torch path keeps
    them) when they come first and every later one is a longer prompt chunk: their count; else None (the torch
    path). Steps without verification windows need no split (None)."""
    if not ctx.keep_window_states:
        return None
    short = [n <= _RECURRENT_MAX_QUERY_LEN for n in ctx.query_lens]
    windows = short.index(False) if not all(short) else len(short)
    return windows if 0 < windows < len(short) and not any(short[windows:]) else None


def _similar_lengths(seqs: list[int], lens: list[int]) -> list[list[int]]:
    """`seqs` in batches whose longest member has at most twice the chunks of the shortest (chunked
    batches pad every member to the longest)."""
    batches: list[list[int]] = []
    for i in sorted(seqs, key=lambda i: lens[i]):
        if batches and -(-lens[i] // _CHUNK_SIZE) <= 2 * -(-lens[batches[-1][0]] // _CHUNK_SIZE):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _padded_layout(seqs: list[int], starts: list[int], lens: list[int],
                   device: torch.device) -> tuple[torch.Tensor, ...]:
    """Token indices of `seqs` [n], their (row, column) in a padded [len(seqs), max_len] layout [n] x2,
    the sequences themselves [len(seqs)] and each one's last column [len(seqs)]: one host-to-device copy."""
    tokens = torch.cat([torch.arange(starts[i], starts[i] + lens[i]) for i in seqs])
    row = torch.cat([torch.full((lens[i],), j) for j, i in enumerate(seqs)])
    col = torch.cat([torch.arange(lens[i]) for i in seqs])
    last = torch.tensor([lens[i] - 1 for i in seqs])
    packed = index_tensor(torch.cat([tokens, row, col, torch.tensor(seqs), last]), device)
    return tuple(packed.split([len(tokens)] * 3 + [len(seqs)] * 2))


def _pad(x: torch.Tensor, row: torch.Tensor, col: torch.Tensor, num_rows: int, max_len: int) -> torch.Tensor:
    # zero padding at the end of a row leaves the delta-rule state unchanged (g = beta = 0)
    padded = x.new_zeros(num_rows, max_len, *x.shape[1:])
    padded[row, col] = x
    return padded
