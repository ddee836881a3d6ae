"""Paged attention on the CPU for float32 KV pools (native/paged_attention_cpu.c, in cpu_quant's library and
on its thread pool): the decode and short-window steps of the CPU path read K and V in place through the
block tables, where the torch path gathers every sequence's keys into a padded batch and builds a mask for
SDPA in every layer (SmolLM2 Q4_1, 8 streams on 2 cores: 38.8 against 45.7 ms a step at ~100 tokens of context,
104.9 against 176.4 at ~900; bench/results/2026-12-02-cpu-session21).

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


@functools.cache
def _kernel():
    """The AVX2 + FMA build where the CPU has them (the kernels cpu_quant uses say so), else the portable one."""
    library = cpu_quant._require()
    avx2 = cpu_quant.available_isas()[-1] != "scalar" and hasattr(library, cpu_quant._ATTENTION_AVX2)
    return getattr(library, cpu_quant._ATTENTION_AVX2 if avx2 else cpu_quant._ATTENTION)


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

