"""Paged attention at long contexts, Qwen3-Next geometry (16 q / 2 kv heads x 256, block 16): the split
count and KV tile against context (4K-128K), sequences (1-16) and window (1, 4), with the table as wide as
a 128K max_model_len makes it (graphs size splits by it). Prints us per call and KV GB/s."""
import sys
import torch
import triton
from strata.bench.kernels import per_call_seconds
from strata.kernels.paged_attention import num_splits_for, paged_attention, paged_attention_ref

H, HKV, D, BS = 16, 2, 256, 16
TABLE = 131072 // BS
dtype = torch.bfloat16
kv_dtype = sys.argv[1] if len(sys.argv) > 1 else "bf16"
num_blocks = 16 * TABLE + 64
k_cache = torch.randn(num_blocks, BS, HKV, D, device="cuda", dtype=dtype)
v_cache = torch.randn_like(k_cache)
scales = None
if kv_dtype == "fp8":
    k_cache, v_cache = k_cache.to(torch.float8_e4m3fn), v_cache.to(torch.float8_e4m3fn)
for seqs, context, qlen in [(1, 4096, 1), (1, 32768, 1), (1, 131072, 1), (1, 131072, 4), (4, 32768, 1),
                            (16, 4096, 1), (16, 4096, 4), (16, 32768, 1)]:
    blocks = context // BS
    table = torch.arange(seqs * TABLE, device="cuda").view(seqs, TABLE)
    q = torch.randn(seqs * qlen, H, D, device="cuda", dtype=dtype)
    seq_lens = torch.full((seqs,), context, device="cuda")
    qsl = torch.arange(seqs + 1, device="cuda") * qlen
    kv_bytes = seqs * context * HKV * D * 2 * k_cache.element_size()
    ref = None
    if context <= 32768 and seqs == 1:
        ref = paged_attention_ref(q.float(), k_cache[:TABLE].float(), v_cache[:TABLE].float(), table, seq_lens, qsl, D ** -0.5)
    qpad = triton.next_power_of_2(qlen)
    line = []
    for block_n, stages in [(32, 1), (32, 2), (16, 2), (64, 1)]:
        for splits in [None, 32, 64, 128, 256, 512]:
            s = splits or num_splits_for(seqs, HKV, TABLE, BS, block_n, qpad, q.device)
            try:
                call = lambda: paged_attention(q, k_cache, v_cache, table, seq_lens, qsl, D ** -0.5, max_query_len=qlen,
                                               num_splits=s, block_n=block_n, num_stages=stages)
                out = call()
                err = ((out.float() - ref).norm() / ref.norm()).item() if ref is not None else 0.0
                us = per_call_seconds([call]) * 1e6
            except Exception as e:  # shared memory etc.
                print(f"  seqs={seqs} ctx={context} q={qlen} bn={block_n} st={stages} splits={s}: {type(e).__name__}")
                continue
            tag = "heur" if splits is None else ""
            line.append((us, block_n, stages, s, tag, err))
    line.sort()
    print(f"== {kv_dtype} seqs={seqs} ctx={context} q={qlen}: KV {kv_bytes/2**20:.0f} MiB")
    heur = [x for x in line if x[4] == "heur" and x[1] == 32 and x[2] == 1][0]
    for us, bn, st, s, tag, err in line[:5] + [heur]:
        print(f"   {us:9.1f} us {kv_bytes/us/1e3:7.0f} GB/s  bn={bn} st={st} splits={s} {tag} err={err:.1e}")
