import time, torch, numpy as np, gguf
from strata.kernels import cpu_quant as cq
r = gguf.GGUFReader(__import__("sys").argv[1])
seen = set()
for tn in r.tensors:
    key = (tn.tensor_type, tn.name.split(".")[-2])
    if tn.tensor_type.name == "F32" or key in seen: continue
    seen.add(key)
    data = np.asarray(tn.data)
    k = int(tn.shape[0]); 
    b = torch.from_numpy(data.reshape(-1, data.shape[-1]).copy())
    n = b.shape[0]
    if n > 20000: b = b[:16384].contiguous(); n = 16384
    for t in (1, 8):
        x = torch.randn(t, k)
        res = []
        for f in (cq.dequant_matmul, cq.quant_matmul):
            f(x, b, int(tn.tensor_type), n, k)
            s = time.perf_counter()
            for _ in range(10): f(x, b, int(tn.tensor_type), n, k)
            res.append((time.perf_counter() - s) / 10 * 1e6)
        print(f"{tn.name:28s} {tn.tensor_type.name:5s} [{n}x{k}] t={t} exact {res[0]:8.1f} us ({n*k*t/res[0]/1e3:5.2f} GMAC/s) int8 {res[1]:8.1f} us ({n*k*t/res[1]/1e3:5.2f})  x{res[0]/res[1]:.2f}")
