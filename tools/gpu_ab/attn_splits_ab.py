"""Decode attention's split count across sequences and contexts, for the split heuristic (paged_attention.
num_splits_for, `programs_per_sm`): per geometry (issue 23's 30B-A3B: 32 q / 4 kv heads x 128; Qwen3-Next and
Qwen4-Exp: 16 q / 2 kv heads x 256), 1-32 sequences and 256-16K-token contexts, with the table a --max-model-len
of 32768 gives, microseconds a call in a CUDA graph of 20 calls (splits and merge as the engine runs them) for the
heuristic at 8 / 4 / 2 / 1 programs a multiprocessor, and the best of explicit split counts. `python3
attn_splits_ab.py [max_model_len]`."""
import sys

import torch
import triton

from strata.bench.kernels import per_call_seconds
from strata.kernels.paged_attention import kv_tile_for, num_splits_for, paged_attention

BS = 16
TABLE = (int(sys.argv[1]) if len(sys.argv) > 1 else 32768) // BS
dtype = torch.bfloat16
device = torch.device("cuda")
for name, heads, kv_heads, dim in [("30b", 32, 4, 128), ("next", 16, 2, 256)]:
    block_n, _ = kv_tile_for(dim, 2)
    for seqs in (1, 2, 4, 8, 16, 32):
        k_cache = torch.randn(seqs * TABLE + 8, BS, kv_heads, dim, device="cuda", dtype=dtype)
        v_cache = torch.randn_like(k_cache)
        table = torch.arange(seqs * TABLE, device="cuda", dtype=torch.int32).view(seqs, TABLE)
        qsl = torch.arange(seqs + 1, device="cuda", dtype=torch.int32)
        q = torch.randn(seqs, heads, dim, device="cuda", dtype=dtype)
        for context in (256, 1024, 4096, 16384):
            seq_lens = torch.full((seqs,), context, device="cuda", dtype=torch.int32)
            times = {}
            heuristic = {pps: num_splits_for(seqs, kv_heads, TABLE, BS, block_n, 1, device, pps) for pps in (8, 4, 2, 1)}
            tiles = triton.cdiv(context, block_n)
            for splits in sorted(set(heuristic.values()) | {s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= 2 * tiles}):
                call = lambda: paged_attention(q, k_cache, v_cache, table, seq_lens, qsl, dim ** -0.5, max_query_len=1,
                                               num_splits=splits)
                times[splits] = per_call_seconds([call] * 20) * 1e6
            best = min(times, key=times.get)
            line = "  ".join(f"pps{pps}:{s}={times[s]:.2f}" for pps, s in heuristic.items())
            print(f"{name} seqs={seqs:2d} ctx={context:5d} tiles={tiles:3d}  {line}  best {best}={times[best]:.2f}",
                  flush=True)
