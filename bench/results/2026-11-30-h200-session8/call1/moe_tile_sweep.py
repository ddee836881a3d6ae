"""Device-only: gate/up and down kernels of fused_moe alone at one token (E=128, K=8, D=2048, I=768), over
tilings, 24 weight copies per graph (> L2), PDL on; fraction of a device copy."""
import itertools, sys, torch, triton
from strata.kernels.bench_kernels import per_call_seconds, copy_bandwidth
from strata.kernels import fused_moe as fm
from strata.kernels.moe_align import moe_align
from strata.kernels.launch import pdl_options
E, K, D, I, L = 128, 8, 2048, 768, 24
T = int(sys.argv[1]) if len(sys.argv) > 1 else 1
w13 = torch.randn(L, E, 2 * I, D, device="cuda", dtype=torch.bfloat16) * D ** -0.5
w2 = torch.randn(L, E, D, I, device="cuda", dtype=torch.bfloat16) * I ** -0.5
bw = copy_bandwidth()
hs = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
ids = torch.stack([torch.randperm(E, device="cuda")[:K] for _ in range(T)])
wts = torch.rand(T, K, device="cuda", dtype=torch.bfloat16)
distinct = ids.unique().numel()
print(f"T={T} copy {bw/1e12:.3f} TB/s, distinct experts {distinct}")
for bn, bk, nw, ns in itertools.product((16, 32, 64), (64, 128, 256), (4,), (3, 4, 6)):
    if bn * bk > 16384: continue
    sorted_ids, block_expert = moe_align(ids, E, 16)
    nb = block_expert.numel()
    act = hs.new_empty(sorted_ids.numel(), I).normal_()
    partial = torch.empty(T * K, D, dtype=torch.float32, device="cuda")
    launch = dict(num_warps=nw, num_stages=ns, **pdl_options(hs))
    def gu(l):
        fm._gate_up_kernel[(nb, triton.cdiv(I, bn))](hs, w13[l], act, sorted_ids, block_expert, I, D, K, T * K,
            hs.stride(0), w13.stride(1), w13.stride(2), act.stride(0), BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, **launch)
    def dn(l):
        fm._down_kernel[(nb, triton.cdiv(D, bn))](act, w2[l], partial, sorted_ids, block_expert, wts.reshape(-1), D, I,
            T * K, act.stride(0), w2.stride(1), w2.stride(2), partial.stride(0), BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, **launch)
    try:
        s1 = per_call_seconds([lambda l=l: gu(l) for l in range(L)])
        s2 = per_call_seconds([lambda l=l: dn(l) for l in range(L)])
    except Exception as e:
        print(bn, bk, nw, ns, "failed", type(e).__name__); continue
    b1, b2 = distinct * 2 * I * D * 2, distinct * I * D * 2
    print(f"BN={bn:3d} BK={bk:3d} w={nw} s={ns}: gate_up {s1*1e6:6.2f} us ({b1/s1/bw:.3f})  down {s2*1e6:6.2f} us ({b2/s2/bw:.3f})", flush=True)
