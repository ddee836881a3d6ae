"""Issue 28's speculation targets against a byte model (CPU-only arithmetic, no measurement): the ceiling of
synthetic speculation (acceptance length L, k drafts) over plain decode at S streams, on
random:qwen3-next-80b-a3b?num_hidden_layers=8 in bf16, when a step costs its bytes at a fixed share of the
measured copy bandwidth plus a fixed per-step time. Random routers spread tokens uniformly over the 512 experts,
so a step of t tokens reads E * (1 - (1 - top_k / E) ** t) experts a MoE layer: a verification step of S * (k + 1)
tokens reads far more expert bytes than a plain step of S tokens. usage: python spec_ceiling.py"""
from strata.bench.roofline import ByteModel
from strata.config import ModelConfig
from strata.weights.random_source import SHAPES

COPY_BANDWIDTH = 2.772e12  # B/s, measured on the H200 in session 17 (2 GiB copy_ in a CUDA graph)
SHARE = 0.8                # of it reached by a decode step's reads
FIXED_S = 0.25e-3          # per-step launches and host work not hidden
CONTEXT = 130              # tokens a slot attends (64-token prompts, 128 outputs)
L, K = 3.0, 3

cfg = ModelConfig.from_hf({**SHAPES["qwen3-next-80b-a3b"], "num_hidden_layers": 8})
bm = ByteModel.from_config(cfg, 2)


def seconds(tokens: int, slots: int) -> float:
    touched = bm.num_experts * (1 - (1 - bm.top_k / bm.num_experts) ** tokens)
    return bm.bytes_per_step(touched, CONTEXT * slots, slots)["total"] / (COPY_BANDWIDTH * SHARE) + FIXED_S


print(f"dense {bm.dense_bytes / 1e9:.2f} GB, one expert {bm.expert_bytes / 1e6:.2f} MB x {bm.num_moe_layers} layers")
for slots in (1, 2, 4, 8, 16, 32):
    plain, verify = seconds(slots, slots), seconds(slots * (K + 1), slots)
    print(f"{slots:>2} streams: plain {plain * 1e3:.2f} ms ({slots / plain:,.0f} tok/s), verify {verify * 1e3:.2f} ms "
          f"({L * slots / verify:,.0f} tok/s): ceiling {L * slots / verify / (slots / plain):.2f}x")
