"""Decode attention at short and middle contexts, issue 23's 30B-A3B geometry (32 q / 4 kv heads x 128, KV blocks
of 16, the table as wide as --max-model-len 4096 makes it): microseconds a call in a CUDA graph of 20 calls (splits
and merge launches as the engine's graphs run them) against the split count, for 1 and 8 sequences. Says whether
fewer splits (down to one, whose program writes the output and leaves the merge nothing) pay where the context
has few KV tiles. `python3 attn_short_ab.py [max_model_len]`."""
import sys

import torch

from strata.bench.kernels import per_call_seconds
from strata.kernels.paged_attention import kv_tile_for, num_splits_for, paged_attention, paged_attention_ref

H, HKV, D, BS = 32, 4, 128, 16
TABLE = int(sys.argv[1]) // BS if len(sys.argv) > 1 else 4096 // BS
dtype = torch.bfloat16
block_n, _ = kv_tile_for(D, 2)
for seqs in (1, 8):
    k_cache = torch.randn(seqs * TABLE + 8, BS, HKV, D, device="cuda", dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    table = torch.arange(seqs * TABLE, device="cuda", dtype=torch.int32).view(seqs, TABLE)
    qsl = torch.arange(seqs + 1, device="cuda", dtype=torch.int32)
    heuristic = num_splits_for(seqs, HKV, TABLE, BS, block_n, 1, torch.device("cuda"))
    for context in (128, 192, 256, 384, 512, 1024, 2048, 4096):
        if context > TABLE * BS:
            continue
        q = torch.randn(seqs, H, D, device="cuda", dtype=dtype)
        seq_lens = torch.full((seqs,), context, device="cuda", dtype=torch.int32)
        ref = paged_attention_ref(q[:1].float(), k_cache.float(), v_cache.float(), table[:1], seq_lens[:1], qsl[:2],
                                  D ** -0.5)
        line = []
        for splits in sorted({1, 2, 3, 4, 6, 8, 16, heuristic}):
            call = lambda: paged_attention(q, k_cache, v_cache, table, seq_lens, qsl, D ** -0.5, max_query_len=1,
                                           num_splits=splits)
            err = ((call()[:1].float() - ref).norm() / ref.norm()).item()
            us = per_call_seconds([call] * 20) * 1e6
            line.append(f"{splits}{'h' if splits == heuristic else ''}:{us:.2f}")
            assert err < 1e-2, (seqs, context, splits, err)
        print(f"seqs={seqs} ctx={context:5d} tiles={-(-context // block_n):3d}  " + "  ".join(line), flush=True)
