"""Where the gated MoE sum's kernel and torch's `sigmoid(gate) * shared` part in bf16: the kernel with zero partials,
zero streams and weight 1 returns the gated shared output alone; compared with torch's, its sigmoid and its product."""
import torch
from strata.kernels.hyper import topk_sum_inject
from strata.kernels.rms_norm import gated_shared_ref

torch.manual_seed(0)
rows, dim, dt = 16, 640, torch.bfloat16
shared = torch.randn(rows, dim, device="cuda", dtype=dt)
gate = torch.randn(rows, 1, device="cuda", dtype=dt)
partials = torch.zeros(rows, 1, dim, device="cuda")
streams = torch.zeros(rows, dim, device="cuda", dtype=dt)
weights = torch.ones(rows, 1, device="cuda", dtype=dt)
out = topk_sum_inject(partials, shared, streams, weights, gate)
ref = gated_shared_ref(shared, gate)
sg = torch.sigmoid(gate)
print("kernel vs torch gated product: mismatches", (out != ref).sum().item(), "of", ref.numel())
print("torch bf16 sigmoid vs float32 sigmoid rounded:", (sg != torch.sigmoid(gate.float()).to(dt)).sum().item())
print("torch bf16 product vs float32 product rounded:", (ref != (sg.float() * shared.float()).to(dt)).sum().item())
for r, c in (out != ref).nonzero()[:8].tolist():
    print(f"row {r} col {c}: gate {gate[r, 0].item():.6g} sigmoid {sg[r, 0].item():.8g} shared {shared[r, c].item():.6g}"
          f" kernel {out[r, c].item():.8g} torch {ref[r, c].item():.8g} exact {(sg[r, 0].double() * shared[r, c].double()).item():.10g}")
# with expert partials: does the kernel round the gated product before adding it to the rounded sum (torch's order),
# or add the unrounded product (a folded round trip and a fused multiply-add)?
partials = torch.randn(rows, 1, dim, device="cuda")
out = topk_sum_inject(partials, shared, streams, weights, gate)
total = partials[:, 0].to(dt)
torch_order = total + ref
unrounded = (total.float() + sg.float() * shared.float()).to(dt)
print("with partials: kernel vs torch order", (out != torch_order).sum().item(), "; kernel vs unrounded product",
      (out != unrounded).sum().item(), "; torch order vs unrounded", (torch_order != unrounded).sum().item())
