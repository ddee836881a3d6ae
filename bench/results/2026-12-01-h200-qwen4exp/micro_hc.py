"""Times of the hyper-connection mixer on the Qwen4-Exp shape (hc 4, D 2560, rank 320), one row: the two
kernels at a few block sizes, the torch form; and the stream write-back at 512 rows (addcmul vs mul + add)."""
import torch, triton
from triton.testing import do_bench
from strata.kernels import hyper

torch.manual_seed(0)
hc, D, R = 4, 2560, 320
C = hc * D
dt = torch.bfloat16
dev = "cuda"
norm = (0.1 * torch.randn(C, device=dev)).to(dt)
down = (torch.randn(R, C, device=dev) * C ** -0.5).to(dt)
up = (torch.randn(C, R, device=dev) * R ** -0.5).to(dt)
inj = (torch.randn(hc, C, device=dev) * C ** -0.5).to(dt)
for T in (1, 4):
    x = torch.randn(T, C, device=dev).to(dt)
    ref = do_bench(lambda: hyper.hyper_mix_ref(x, norm, down, up, inj, hc, 1e-6), warmup=50, rep=300)
    print(f"T={T} torch form {ref * 1e3:.1f} us")
    outputs = R + hc
    for br, bc, warps in ((4, 512, 4), (4, 4096, 4), (4, 4096, 8), (2, 4096, 4), (2, 4096, 8), (1, 4096, 4), (8, 4096, 8), (2, 2048, 4)):
        normed = torch.empty_like(x)
        partials = torch.empty(T, hc, outputs, device=dev, dtype=torch.float32)
        f = lambda: hyper._down_kernel[(T, triton.cdiv(outputs, br), hc)](
            x, norm, down, inj, normed, partials, C, D, R, outputs, 1e-6, BLOCK_C=bc, BLOCK_R=br, num_warps=warps)
        print(f"T={T} down BLOCK_R={br} BLOCK_C={bc} warps={warps}: {do_bench(f, warmup=50, rep=300) * 1e3:.1f} us")
    out = torch.empty(T, D, device=dev, dtype=dt)
    w = torch.empty(T, hc, device=dev, dtype=dt)
    for bd, warps in ((8, 4), (2, 1), (1, 1), (2, 2), (4, 1), (1, 2)):
        f = lambda: hyper._up_kernel[(T, triton.cdiv(D, bd))](
            normed, partials, up, out, w, C, D, R, outputs, hc, 1.0 / hc, HC=hc, BLOCK_D=bd, BLOCK_R=512, BLOCK_I=4,
            num_warps=warps)
        print(f"T={T} up BLOCK_D={bd} warps={warps}: {do_bench(f, warmup=50, rep=300) * 1e3:.1f} us")
    both = do_bench(lambda: hyper.hyper_mix(x, norm, down, up, inj, hc, 1e-6), warmup=50, rep=300)
    print(f"T={T} hyper_mix as shipped {both * 1e3:.1f} us; weights {2 * 2 * C * R / 1e6:.1f} MB")
s = torch.randn(512, C, device=dev).to(dt); o = torch.randn(512, D, device=dev).to(dt); wt = torch.rand(512, hc, device=dev).to(dt)
a = do_bench(lambda: torch.addcmul(s.unflatten(-1, (hc, -1)), wt.unsqueeze(-1), o.unsqueeze(-2)), warmup=20, rep=200)
b = do_bench(lambda: s + (o.unsqueeze(-2) * wt.unsqueeze(-1)).flatten(-2), warmup=20, rep=200)
print(f"write-back at 512 rows: addcmul {a * 1e3:.1f} us, mul + add {b * 1e3:.1f} us")
