"""Gated DeltaNet kernels for ragged batches of short windows (decode, 1 + k verification): the
token-by-token delta rule and the depthwise causal conv1d update, each reading its sequence's state
from the pool row `slot_ids[i]` (zeros when has_initial_state[i] is False) and writing the state after
the window's last token back in place. Both can also write the state after every token, so a rejected
draft suffix is rolled back by picking a row. The delta-rule state is float32.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: the *_ref functions still work
    triton = tl = None

from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel


def gdn_recurrent_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                      state_pool: torch.Tensor, slot_ids: torch.Tensor, query_start_loc: torch.Tensor,
                      has_initial_state: torch.Tensor, keep_all_states: bool = True
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q, k [T, Hk, Dk] (L2-normalised; v head h reads q/k head h // (Hv // Hk)), v [T, Hv, Dv],
    g (log decay) and beta [T, Hv], state_pool [S_max, Hv, Dk, Dv] float32 (rows of slot_ids updated in
    place) -> out [T, Hv, Dv] in v's dtype, and the state after each token [T, Hv, Dk, Dv] or None."""
    group = v.shape[1] // k.shape[1]
    q = q.float().repeat_interleave(group, 1) * q.shape[-1] ** -0.5
    k = k.float().repeat_interleave(group, 1)
    out = torch.empty_like(v)
    all_states = state_pool.new_empty(v.shape[0], *state_pool.shape[1:]) if keep_all_states else None
    starts = query_start_loc.tolist()
    for i, slot in enumerate(slot_ids.tolist()):
        state = state_pool[slot].float() if bool(has_initial_state[i]) else torch.zeros_like(state_pool[slot])
        for t in range(starts[i], starts[i + 1]):
            state = state * g[t].float().exp()[:, None, None]                        # [Hv, Dk, Dv]
            delta = (v[t].float() - torch.einsum("hkv,hk->hv", state, k[t])) * beta[t].float()[:, None]
            state = state + k[t][:, :, None] * delta[:, None, :]
            out[t] = torch.einsum("hkv,hk->hv", state, q[t]).to(out.dtype)
            if all_states is not None:
                all_states[t] = state
        state_pool[slot] = state
    return out, all_states


def causal_conv1d_update_ref(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
                             slot_ids: torch.Tensor, query_start_loc: torch.Tensor,
                             has_initial_state: torch.Tensor, keep_window_states: bool = False,
                             silu: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Depthwise causal conv of each window after its W-1 remembered inputs: x [T, C], weight [C, W],
    conv_state [S_max, C, W-1] (rows of slot_ids get the last W-1 inputs, history included) -> out [T, C]
    in x's dtype (SiLU applied when `silu`), and the conv state after each token [T, C, W-1] or None."""
    hist = weight.shape[1] - 1
    out = torch.empty_like(x)
    window = conv_state.new_empty(x.shape[0], x.shape[1], hist) if keep_window_states else None
    starts = query_start_loc.tolist()
    for i, slot in enumerate(slot_ids.tolist()):
        s, e = starts[i], starts[i + 1]
        history = conv_state[slot].T if bool(has_initial_state[i]) else conv_state.new_zeros(hist, x.shape[1])
        ext = torch.cat([history.to(x.dtype), x[s:e]]).float()                     # [W-1 + n, C]
        for j in range(e - s):
            y = (ext[j:j + hist + 1].T * weight.float()).sum(dim=1)               # [C]
            out[s + j] = (torch.nn.functional.silu(y) if silu else y).to(x.dtype)
            if window is not None:
                window[s + j] = ext[j + 1:j + hist + 1].T.to(window.dtype)
        conv_state[slot] = ext[ext.shape[0] - hist:].T.to(conv_state.dtype)
    return out, window


class GroupedQKV(NamedTuple):
    """Qwen3-Next's in_proj_qkvz rows, grouped per key head: [q (Dk) | k (Dk) | v (g Dv) | z (g Dv)] for each
    of the Hk key heads, g = Hv / Hk. The conv reads its plain channels [q | k | v] (key_dim = Hk Dk each for
    q and k) from there without a gather launch."""

    key_dim: int
    head_k_dim: int
    group_v_dim: int


class RawGates(NamedTuple):
    """The delta rule's per-head decay and write strength as the projection gives them, finished in the
    kernel: g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) in float32. Head h's a and b sit
    at column (h // group) * stride + h % group of their rows (group = Hv, stride 0: column h)."""

    A_log: torch.Tensor
    dt_bias: torch.Tensor
    group: int
    stride: int


def gdn_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                  state_pool: torch.Tensor, slot_ids: torch.Tensor, query_start_loc: torch.Tensor,
                  has_initial_state: torch.Tensor, keep_all_states: bool = True, block_v: int = 32,
                  num_warps: int = 2, all_states_out: torch.Tensor | None = None,
                  real_lens: torch.Tensor | None = None, raw: RawGates | None = None,
                  tiled: bool = False, out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as gdn_recurrent_ref, but for the per-token states: the row of each window's last (real) token
    is left unwritten, its state being the pool row's (a roll-back never reads it: a slot that accepted its whole
    window keeps its pool row; state_rollback.py). One program per (sequence, v head, Dv tile) holds its
    [Dk, BV] state slice in registers across the window. `all_states_out` ([>= T, Hv, Dk, Dv], float32)
    receives the per-token states instead of a fresh tensor (a persistent buffer keeps CUDA graphs from
    each holding their own). `real_lens` [S]: only each window's first real_lens[s] tokens are real (a
    prompt padded in place in a graph layout): the state stops after them and the padding rows' outputs
    are zero.

    With `raw`, the kernel finishes what the layer would compute first: q and k come as the conv's
    output, not yet L2-normalised, and g and beta are the projection's a and b (RawGates). `tiled`: value
    head h reads key head h % Hk (else h // (Hv / Hk)). `out` (like v): where the outputs go, only the rows of
    these sequences written (a step's sequences in two launches, each its own slot_ids and query_start_loc
    rows)."""
    num_tokens, num_v_heads, dim_v = v.shape
    num_k_heads, dim_k = k.shape[1], k.shape[2]
    num_seqs = slot_ids.shape[0]
    assert state_pool.dtype == torch.float32 and state_pool.is_contiguous()
    assert q.stride(2) == 1 and k.stride(2) == 1 and v.stride(2) == 1 and q.stride() == k.stride()
    # Dv tiles of 32 on 2 warps whatever the step (one tiling, so a window's sums round alike in every step): on an
    # H100 (session 67, bench/results/2026-12-07-h100-session67/; Qwen3-Next's heads) the fastest or within ~1 us
    # of it for decode rows and verification windows of 1-16 sequences, and 61 / 234 us for 64- / 256-token prompts
    # against 65 / 254 on the 16-column, 4-warp tiling used before (its best, 16 columns on 2 warps: 54 / 209)
    block_v = min(block_v, triton.next_power_of_2(dim_v))
    out = v.new_empty(v.shape) if out is None else out
    all_states = _per_token_states(keep_all_states, all_states_out, state_pool, num_tokens)
    A_log, dt_bias, gate_group, gate_stride = raw if raw is not None else (g, g, num_v_heads, 0)
    _gdn_kernel[(num_seqs, num_v_heads, triton.cdiv(dim_v, block_v))](
        q, k, v, g, beta, A_log, dt_bias, state_pool, all_states, out, slot_ids, query_start_loc,
        has_initial_state, real_lens if real_lens is not None else slot_ids,
        num_v_heads // num_k_heads, num_k_heads, gate_group, gate_stride, dim_k, dim_v, dim_k ** -0.5,
        q.stride(0), q.stride(1), v.stride(0), v.stride(1), g.stride(0), beta.stride(0),
        state_pool.stride(0), all_states.stride(0), out.stride(0), out.stride(1),
        STORE_ALL=keep_all_states, HAS_REAL=real_lens is not None, RAW=raw is not None, TILED=tiled,
        BLOCK_K=triton.next_power_of_2(dim_k), BLOCK_V=block_v, num_warps=num_warps, **pdl_options(v))
    return out, (all_states if keep_all_states else None)


def _per_token_states(keep: bool, out: torch.Tensor | None, pool: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Where a kernel writes the state after every token: the caller's buffer, a fresh [T, ...] tensor
    shaped like a pool row, or (nothing kept) the pool itself as a never-written placeholder."""
    if not keep:
        return pool
    if out is not None:
        return out[:num_tokens]
    return pool.new_empty(num_tokens, *pool.shape[1:])


def causal_conv1d_update(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, slot_ids: torch.Tensor,
                         query_start_loc: torch.Tensor, has_initial_state: torch.Tensor,
                         keep_window_states: bool = False, silu: bool = False, block_c: int = 256,
                         window_out: torch.Tensor | None = None, real_lens: torch.Tensor | None = None,
                         grouped: GroupedQKV | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as causal_conv1d_update_ref; one program per (sequence, channel tile). `window_out`
    ([>= T, C, W-1]) receives the per-token conv states instead of a fresh tensor. `real_lens` [S]: the
    history kept is that after each window's first real_lens[s] tokens (padding rows still get outputs).
    x may have more columns than the C = weight.shape[0] channels (a projection's whole output row): channel
    c reads column c, or with `grouped` the column where the per-key-head layout keeps it (GroupedQKV)."""
    num_tokens, channels = x.shape[0], weight.shape[0]
    width = weight.shape[1]
    assert x.stride(1) == 1 and weight.is_contiguous() and conv_state.shape[2] == width - 1
    assert x.shape[1] >= channels
    out = x.new_empty(num_tokens, channels)
    window = _per_token_states(keep_window_states, window_out, conv_state, num_tokens)
    key_dim, head_k_dim, group_v_dim = grouped if grouped is not None else (channels, 1, 1)
    _conv_kernel[(slot_ids.shape[0], triton.cdiv(channels, block_c))](
        x, weight, conv_state, window, out, slot_ids, query_start_loc, has_initial_state,
        real_lens if real_lens is not None else slot_ids, channels, key_dim, head_k_dim, group_v_dim,
        x.stride(0), conv_state.stride(0), conv_state.stride(1), conv_state.stride(2),
        window.stride(0), window.stride(1), window.stride(2), out.stride(0),
        WIDTH=width, KEEP_WINDOW=keep_window_states, SILU=silu, HAS_REAL=real_lens is not None,
        GROUPED=grouped is not None, BLOCK_C=block_c, num_warps=4, **pdl_options(x))
    return out, (window if keep_window_states else None)


if triton is not None:

    @triton.jit
    def _gdn_token_inputs(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t64, live, k_head, head, gate_col, offs_k, offs_v,
                          k_ok, v_ok, stride_qt, stride_qh, stride_vt, stride_vh, stride_gt, stride_bt):
        """Token row t64's k, q [BK], v [BV] and its gate and write strength, float32 (zeros unless `live`)."""
        qk_row = t64 * stride_qt + k_head * stride_qh + offs_k
        k_mask, v_mask = tl.where(live, k_ok, False), tl.where(live, v_ok, False)  # selects: see conv_input
        k_t = tl.load(k_ptr + qk_row, mask=k_mask, other=0.0).to(tl.float32)
        q_t = tl.load(q_ptr + qk_row, mask=k_mask, other=0.0).to(tl.float32)
        v_t = tl.load(v_ptr + t64 * stride_vt + head * stride_vh + offs_v, mask=v_mask, other=0.0).to(tl.float32)
        g_t = tl.load(g_ptr + t64 * stride_gt + gate_col, mask=live, other=0.0).to(tl.float32)
        beta = tl.load(beta_ptr + t64 * stride_bt + gate_col, mask=live, other=0.0).to(tl.float32)
        return k_t, q_t, v_t, g_t, beta

    @triton.jit
    def _gdn_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, a_log_ptr, dt_bias_ptr, pool_ptr, all_ptr, out_ptr,
                    slots_ptr, qsl_ptr, has_init_ptr, real_ptr, group, num_k_heads, gate_group, gate_stride,
                    dim_k, dim_v, q_scale, stride_qt, stride_qh, stride_vt, stride_vh, stride_gt, stride_bt,
                    stride_pool, stride_all, stride_ot, stride_oh,
                    STORE_ALL: tl.constexpr, HAS_REAL: tl.constexpr, RAW: tl.constexpr, TILED: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        seq, head, v_block = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        slot = tl.load(slots_ptr + seq).to(tl.int64)
        has_init = tl.load(has_init_ptr + seq) != 0
        start = tl.load(qsl_ptr + seq)
        window_end = tl.load(qsl_ptr + seq + 1)
        end = window_end
        if HAS_REAL:  # a padded prompt: the state stops after its real tokens
            end = tl.minimum(start + tl.load(real_ptr + seq), window_end)
        k_head = head % num_k_heads if TILED else head // group
        gate_col = (head // gate_group) * gate_stride + head % gate_group
        if RAW:
            neg_a = -tl.exp(tl.load(a_log_ptr + head).to(tl.float32))
            dt_bias = tl.load(dt_bias_ptr + head).to(tl.float32)
        offs_k = tl.arange(0, BLOCK_K)
        offs_v = v_block * BLOCK_V + tl.arange(0, BLOCK_V)
        k_ok, v_ok = offs_k < dim_k, offs_v < dim_v
        tile_ok = k_ok[:, None] & v_ok[None, :]
        tile = head * dim_k * dim_v + offs_k[:, None] * dim_v + offs_v[None, :]             # within one row
        state = tl.where(has_init, tl.load(pool_ptr + slot * stride_pool + tile, mask=tile_ok, other=0.0), 0.0)
        # each token's inputs are loaded one token ahead, so their memory latency overlaps the token before's
        # update instead of stalling every step of the sequential loop
        k_n, q_n, v_n, g_n, beta_n = _gdn_token_inputs(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, start, start < end,
                                                       k_head, head, gate_col, offs_k, offs_v, k_ok, v_ok,
                                                       stride_qt, stride_qh, stride_vt, stride_vh, stride_gt,
                                                       stride_bt)
        for t64 in range(start, end):  # start/end are int64: no overflow in the row offsets
            k_t, q_t, v_t, g_t, beta = k_n, q_n, v_n, g_n, beta_n
            k_n, q_n, v_n, g_n, beta_n = _gdn_token_inputs(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t64 + 1,
                                                           t64 + 1 < end, k_head, head, gate_col, offs_k, offs_v,
                                                           k_ok, v_ok, stride_qt, stride_qh, stride_vt, stride_vh,
                                                           stride_gt, stride_bt)
            if RAW:  # the layer's l2norm (x * rsqrt(|x|^2 + 1e-6)) and gates (RawGates)
                k_t = k_t * tl.rsqrt(tl.sum(k_t * k_t, axis=0) + 1e-6)
                q_t = q_t * tl.rsqrt(tl.sum(q_t * q_t, axis=0) + 1e-6)
                g_t = g_t + dt_bias
                g_t = neg_a * tl.where(g_t > 20.0, g_t, tl.log(1.0 + tl.exp(g_t)))  # softplus (threshold 20)
                beta = tl.sigmoid(beta)
            q_t = q_t * q_scale
            state = state * tl.exp(g_t)
            delta = (v_t - tl.sum(state * k_t[:, None], axis=0)) * beta                  # [BV]
            state = state + k_t[:, None] * delta[None, :]
            o = tl.sum(state * q_t[:, None], axis=0)
            tl.store(out_ptr + t64 * stride_ot + head * stride_oh + offs_v, o.to(out_ptr.dtype.element_ty),
                     mask=v_ok)
            if STORE_ALL and t64 + 1 < end:  # the last token's state goes to the pool row only (see gdn_recurrent)
                tl.store(all_ptr + t64 * stride_all + tile, state, mask=tile_ok)
        tl.store(pool_ptr + slot * stride_pool + tile, state, mask=tile_ok)
        if HAS_REAL:  # padding rows: zeros (finite, so the layers after them stay finite too)
            for t64 in range(end, window_end):
                tl.store(out_ptr + t64 * stride_ot + head * stride_oh + offs_v,
                         tl.zeros((BLOCK_V,), dtype=out_ptr.dtype.element_ty), mask=v_ok)

    @triton.jit
    def sequence_window(seq, slots_ptr, qsl_ptr, has_init_ptr):
        """Sequence `seq` of a ragged step -> (its state row, int64; whether it has an initial state; its first
        token row; its token count)."""
        slot = tl.load(slots_ptr + seq).to(tl.int64)
        has_init = tl.load(has_init_ptr + seq) != 0
        start = tl.load(qsl_ptr + seq)
        return slot, has_init, start, tl.load(qsl_ptr + seq + 1) - start

    @triton.jit
    def conv_input(x_ptr, state_ptr, start, pos, offs_c, x_cols, c_ok, has_init, stride_xt, stride_sc, stride_sw,
                   WIDTH: tl.constexpr):
        """A causal conv's inputs at window position pos (a scalar, or [P, 1] against [1, C] columns; < 0: the
        remembered history of WIDTH - 1 inputs, zeros without an initial state) -> float32. x_cols: the channels'
        columns in x (offs_c, or where a grouped layout keeps them). Also the PLE conv's (kernels/ple.py)."""
        # scalar conditions by selects, not `&`: Triton 3.9's interpreter makes int32 of a vector & a scalar flag
        # and refuses it as a mask; compiled, both are one predicate
        from_x = tl.load(x_ptr + (start + pos).to(tl.int64) * stride_xt + x_cols, mask=tl.where(pos >= 0, c_ok, False),
                         other=0.0)
        from_state = tl.load(state_ptr + offs_c * stride_sc + (WIDTH - 1 + pos) * stride_sw,
                             mask=tl.where(has_init & (pos < 0), c_ok, False), other=0.0)
        return from_x.to(tl.float32) + from_state.to(tl.float32)

    @triton.jit
    def _conv_kernel(x_ptr, w_ptr, state_ptr, window_ptr, out_ptr, slots_ptr, qsl_ptr, has_init_ptr, real_ptr,
                     channels, key_dim, head_k_dim, group_v_dim,
                     stride_xt, stride_ss, stride_sc, stride_sw, stride_wt, stride_wc, stride_ww, stride_ot,
                     WIDTH: tl.constexpr, KEEP_WINDOW: tl.constexpr, SILU: tl.constexpr, HAS_REAL: tl.constexpr,
                     GROUPED: tl.constexpr, BLOCK_C: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        seq, c_block = tl.program_id(0), tl.program_id(1)
        slot, has_init, start, length = sequence_window(seq, slots_ptr, qsl_ptr, has_init_ptr)
        offs_c = c_block * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = offs_c < channels
        x_cols = offs_c
        if GROUPED:
            x_cols = _grouped_column(offs_c, key_dim, head_k_dim, group_v_dim)
        row_ptr = state_ptr + slot * stride_ss
        for t in range(0, length):
            acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
            for j in tl.static_range(WIDTH):
                x_j = conv_input(x_ptr, row_ptr, start, t - (WIDTH - 1) + j, offs_c, x_cols, c_ok, has_init,
                                  stride_xt, stride_sc, stride_sw, WIDTH)
                acc += x_j * tl.load(w_ptr + offs_c * WIDTH + j, mask=c_ok, other=0.0).to(tl.float32)
            if SILU:
                acc = acc * tl.sigmoid(acc)
            tl.store(out_ptr + (start + t).to(tl.int64) * stride_ot + offs_c, acc.to(out_ptr.dtype.element_ty),
                     mask=c_ok)
            if KEEP_WINDOW:
                for j in tl.static_range(WIDTH - 1):
                    x_j = conv_input(x_ptr, row_ptr, start, t - (WIDTH - 2) + j, offs_c, x_cols, c_ok, has_init,
                                      stride_xt, stride_sc, stride_sw, WIDTH)
                    tl.store(window_ptr + (start + t).to(tl.int64) * stride_wt + offs_c * stride_wc + j * stride_ww,
                             x_j.to(window_ptr.dtype.element_ty), mask=c_ok)
        # the last W-1 (real) inputs become the new history; read them all before overwriting the row
        kept = length
        if HAS_REAL:
            kept = tl.minimum(tl.load(real_ptr + seq), length)
        _store_history(x_ptr, row_ptr, start, kept, offs_c, x_cols, c_ok, has_init, stride_xt, stride_sc, stride_sw,
                       WIDTH)

    @triton.jit
    def _grouped_column(c, key_dim, head_k_dim, group_v_dim):
        # plain channel c of [q | k | v] -> its column in rows grouped per key head [q | k | v | z]
        width = 2 * head_k_dim + 2 * group_v_dim
        in_k = c - key_dim
        in_v = c - 2 * key_dim
        col_q = (c // head_k_dim) * width + c % head_k_dim
        col_k = (in_k // head_k_dim) * width + head_k_dim + in_k % head_k_dim
        col_v = (in_v // group_v_dim) * width + 2 * head_k_dim + in_v % group_v_dim
        return tl.where(c < key_dim, col_q, tl.where(c < 2 * key_dim, col_k, col_v))

    @triton.jit
    def _store_history(x_ptr, row_ptr, start, length, offs_c, x_cols, c_ok, has_init, stride_xt, stride_sc,
                       stride_sw, WIDTH: tl.constexpr):
        tl.static_assert(WIDTH <= 5, "conv widths above 5 need a longer unrolled history")
        h0 = conv_input(x_ptr, row_ptr, start, length - (WIDTH - 1), offs_c, x_cols, c_ok, has_init,
                         stride_xt, stride_sc, stride_sw, WIDTH)
        if WIDTH > 2:
            h1 = conv_input(x_ptr, row_ptr, start, length - (WIDTH - 2), offs_c, x_cols, c_ok, has_init,
                             stride_xt, stride_sc, stride_sw, WIDTH)
        if WIDTH > 3:
            h2 = conv_input(x_ptr, row_ptr, start, length - (WIDTH - 3), offs_c, x_cols, c_ok, has_init,
                             stride_xt, stride_sc, stride_sw, WIDTH)
        if WIDTH > 4:
            h3 = conv_input(x_ptr, row_ptr, start, length - (WIDTH - 4), offs_c, x_cols, c_ok, has_init,
                             stride_xt, stride_sc, stride_sw, WIDTH)
        dtype = row_ptr.dtype.element_ty
        tl.store(row_ptr + offs_c * stride_sc, h0.to(dtype), mask=c_ok)
        if WIDTH > 2:
            tl.store(row_ptr + offs_c * stride_sc + stride_sw, h1.to(dtype), mask=c_ok)
        if WIDTH > 3:
            tl.store(row_ptr + offs_c * stride_sc + 2 * stride_sw, h2.to(dtype), mask=c_ok)
        if WIDTH > 4:
            tl.store(row_ptr + offs_c * stride_sc + 3 * stride_sw, h3.to(dtype), mask=c_ok)
