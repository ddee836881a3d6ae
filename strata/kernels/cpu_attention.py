"""Paged attention on the CPU for float32 KV pools (native/paged_attention_cpu.c, in cpu_quant's library and
on its thread pool): the decode and short-window steps of the CPU path read K and V in place through the
block tables, where the torch path gathers every sequence's keys into a padded batch and builds a mask for
SDPA in every layer (SmolLM2 Q4_1, 8 streams on 2 cores: 38.8 against 45.7 ms a step at ~100 tokens of context,
104.9 against 176.4 at ~900; bench/results/2026-12-02-cpu-session21).

`rope_kv` (native/rope_kv_cpu.c): a plain attention layer's rotary embedding and KV write in one call, the same
bits as the torch path's rotate_rows and write_kv (~30 us a layer of Python and torch dispatch on the bundled model).

`paged_attention_ref` states the semantics (the causal softmax of each window's queries over its
sequence's keys, in float64); tests/kernels/test_cpu_attention.py holds the kernel to it and to the torch
path the model uses otherwise."""

from __future__ import annotations

import functools

import numpy as np
import torch

from strata.kernels import cpu_quant

# work (keys x query heads x head_dim) under which one thread does it all: waking the pool costs more
_ONE_THREAD_WORK = 1 << 18


def available() -> bool:
    """The native library is built here (else the callers keep their torch path)."""
    return cpu_quant._load() is not None


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float,
                    context_tokens: int | None = None) -> torch.Tensor:
    """q [T, H, D] (each sequence's window, the last query_lens of its seq_lens positions) over the caches
    [N_blocks, B, Hkv, D] (float32) through block_tables [S, W], seq_lens [S] and query_start_loc [S + 1]
    (int64, CPU) -> [T, H, D]. `context_tokens`: sum(seq_lens) when the caller knows it (sizes the threads)."""
    heads, dim = q.shape[1], q.shape[2]
    kv_heads, block = k_cache.shape[2], k_cache.shape[1]
    _check(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    out = torch.from_numpy(np.empty(q.shape, np.float32))  # [T, H, D]
    if context_tokens is None:
        context_tokens = int(seq_lens.sum())
    threads = 1 if context_tokens * heads * dim < _ONE_THREAD_WORK else cpu_quant._threads()
    _kernel()(q.data_ptr(), heads, dim, k_cache.data_ptr(), v_cache.data_ptr(), block, kv_heads,
              block_tables.data_ptr(), block_tables.shape[1], seq_lens.data_ptr(), query_start_loc.data_ptr(),
              seq_lens.shape[0], scale, out.data_ptr(), threads)
    return out


def rope_kv(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, cos_rows: torch.Tensor,
            sin_rows: torch.Tensor, slot_mapping: torch.Tensor, k_cache: torch.Tensor,
            v_cache: torch.Tensor) -> torch.Tensor:
    """qkv [T, >= (heads + 2 kv_heads) * head_dim] float32 (unit column stride), each row's query, key and value heads
    -> the rotated queries [T, heads, head_dim]; the rotated keys and the values are written to the float32 caches
    [N_blocks, B, kv_heads, head_dim] at slot_mapping [T] (int64). cos_rows / sin_rows [T, 1, rot_dim] float32:
    RotaryEmbedding.rows' (cos, cos) and (-sin, sin), the rotation over each head's first rot_dim dims."""
    tokens, rot_dim = qkv.shape[0], cos_rows.shape[-1]
    if qkv.dtype != torch.float32 or qkv.stride(1) != 1 or not (k_cache.dtype == v_cache.dtype == torch.float32) \
            or not (k_cache.is_contiguous() and v_cache.is_contiguous()) or k_cache.shape[2:] != (kv_heads, head_dim) \
            or qkv.shape[1] < (heads + 2 * kv_heads) * head_dim or rot_dim % 2 or rot_dim > head_dim:
        raise ValueError(f"rope_kv: qkv {qkv.dtype} {tuple(qkv.shape)} and caches {k_cache.dtype} "
                         f"{tuple(k_cache.shape)} do not fit {heads} + 2 x {kv_heads} heads of {head_dim}")
    cos_rows, sin_rows = cos_rows.contiguous(), sin_rows.contiguous()
    if cos_rows.dtype != torch.float32 or cos_rows.numel() != tokens * rot_dim or sin_rows.shape != cos_rows.shape:
        raise ValueError(f"rope_kv: rotary rows {tuple(cos_rows.shape)}, {tuple(sin_rows.shape)} for {tokens} tokens")
    slots = slot_mapping if slot_mapping.dtype == torch.int64 else slot_mapping.long()
    q = torch.from_numpy(np.empty((tokens, heads, head_dim), np.float32))                 # [T, H, D]
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    status = cpu_quant._require().strata_rope_kv_f32(
        qkv.data_ptr(), tokens, qkv.stride(0), heads, kv_heads, head_dim, rot_dim, cos_rows.data_ptr(),
        sin_rows.data_ptr(), slots.contiguous().data_ptr(), num_slots, k_cache.data_ptr(), v_cache.data_ptr(),
        q.data_ptr())
    if status != 0:
        raise IndexError(f"rope_kv: a slot of {slot_mapping.tolist()} is outside the pool's {num_slots}")
    return q


@functools.cache
def _kernel():
    """The AVX2 + FMA build where the CPU has them (the kernels cpu_quant uses say so), else the portable one."""
    return cpu_quant.entry(cpu_quant._ATTENTION, cpu_quant._ATTENTION_AVX2)


def _check(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc) -> None:
    floats = (q, k_cache, v_cache)
    if any(t.dtype != torch.float32 or not t.is_cpu or not t.is_contiguous() for t in floats):
        raise ValueError("cpu paged_attention: q and the caches must be contiguous CPU float32 tensors, got "
                         f"{[(t.dtype, str(t.device), t.is_contiguous()) for t in floats]}")
    ints = (block_tables, seq_lens, query_start_loc)
    if any(t.dtype != torch.int64 or not t.is_cpu or not t.is_contiguous() for t in ints):
        raise ValueError("cpu paged_attention: block tables, seq_lens and query_start_loc must be contiguous CPU "
                         f"int64 tensors, got {[(t.dtype, str(t.device), t.is_contiguous()) for t in ints]}")
    if q.shape[1] % k_cache.shape[2] or q.shape[2] != k_cache.shape[3] or k_cache.shape != v_cache.shape:
        raise ValueError(f"cpu paged_attention: q {tuple(q.shape)} does not match the caches {tuple(k_cache.shape)}, "
                         f"{tuple(v_cache.shape)} (query heads a multiple of KV heads, one head_dim)")


def paged_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                        seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float) -> torch.Tensor:
    """What paged_attention computes, in float64: [T, H, D]."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    block, group = k_cache.shape[1], q.shape[1] // k_cache.shape[2]
    for s in range(seq_lens.shape[0]):
        first, last, length = int(query_start_loc[s]), int(query_start_loc[s + 1]), int(seq_lens[s])
        positions = torch.arange(length)
        slots = block_tables[s, positions // block] * block + positions % block
        k = k_cache.reshape(-1, *k_cache.shape[2:])[slots].double().repeat_interleave(group, 1)  # [L, H, D]
        v = v_cache.reshape(-1, *v_cache.shape[2:])[slots].double().repeat_interleave(group, 1)
        for j in range(last - first):
            seen = length - (last - first) + j + 1
            scores = torch.einsum("hd,lhd->hl", q[first + j].double(), k[:seen]) * scale  # [H, seen]
            out[first + j] = torch.einsum("hl,lhd->hd", scores.softmax(-1), v[:seen])
    return out

