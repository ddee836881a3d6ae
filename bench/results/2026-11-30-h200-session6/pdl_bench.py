"""Device-only: does programmatic dependent launch shorten a chain of small Triton kernels in a CUDA graph?"""
import torch, triton, triton.language as tl
print("triton", triton.__version__, "torch", torch.__version__, "cuda", torch.version.cuda)

@triton.jit
def gemv(x_ptr, w_ptr, y_ptr, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PDL: tl.constexpr):
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN,), tl.float32)
    if PDL:
        tl.extra.cuda.gdc_wait()
    for k0 in range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        w = tl.load(w_ptr + n[:, None] * K + k[None, :])
        x = tl.load(x_ptr + k)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], 1)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(y_ptr + n, acc.to(tl.bfloat16))

def run(K, N, chain, pdl, BN=16, BK=256):
    ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    xs = [torch.randn(K, device="cuda", dtype=torch.bfloat16) for _ in range(chain + 1)]
    def body():
        for i in range(chain):
            gemv[(N // BN,)](xs[i], ws[i % 4], xs[i + 1][:N] if N <= K else xs[i + 1], K=K, BN=BN, BK=BK, PDL=pdl,
                             launch_pdl=pdl, num_warps=4)
    body(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            body()
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(True), torch.cuda.Event(True)
    a.record()
    for _ in range(20): g.replay()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / 20 / chain

for K, N in ((2048, 2048), (4096, 2048), (2048, 256)):
    off, on = run(K, N, 96, False), run(K, N, 96, True)
    print(f"gemv K={K} N={N}: {off:.2f} us/kernel without PDL, {on:.2f} with ({(N*K*2)/off/1e3:.0f} vs {(N*K*2)/on/1e3:.0f} GB/s)")
