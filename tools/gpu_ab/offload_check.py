"""Does an offloaded run route like an all-resident one? (session 40: 7376f35 computed CPU pairs in 260 of 1,536
offloaded layer steps of a 64-token decode, HEAD in all of them, on the same file with uniform routing.) Greedy
tokens with 25 % of the experts on the GPU against every expert on the GPU, and the routed ids the host parts saw:
pairs per layer step, their share in the resident ids (the uniform split keeps the lowest ids of each layer), and the
most routed ids. usage: offload_check.py GGUF"""
import collections
import sys

import numpy as np

from strata import LLM, SamplingParams
from strata.config import EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig
from strata.experts import provider

path = sys.argv[1]
prompt = [{"prompt_token_ids": list(range(100, 164))}]
params = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True, logprobs=5)
ids_seen = collections.Counter()
layer_steps = missed_pairs = 0
host_part = provider.OffloadedExperts._host_part


def counted(self, num_real_rows, *args, **kwargs):
    global layer_steps, missed_pairs
    result = host_part(self, num_real_rows, *args, **kwargs)
    exchange = self.exchange
    ids = exchange.topk_ids_np[:num_real_rows]
    layer_steps += 1
    missed_pairs += int((exchange.slot_ids_np[:num_real_rows] < 0).sum())
    ids_seen.update((self.layer_idx, int(e)) for e in ids.flatten())
    return result


provider.OffloadedExperts._host_part = counted
tokens = {}
for cache in ("25%", "all"):
    llm = LLM.from_config(EngineConfig(
        model=path, runner=RunnerConfig(device="cuda"), scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16),
        experts=ExpertConfig(expert_cache=cache, cpu_threads=16, pcie_frac="0", expert_swap_interval=0)))
    completion = llm.generate(prompt, params)[0].outputs[0]
    tokens[cache] = completion.token_ids
    print(f"expert_cache {cache}: {list(tokens[cache])}")
    # where the runs part: rounding (close top logprobs: the CPU's int8 activations against the GPU's) or a bug?
    for i in range(3):
        top = sorted(completion.logprobs[i].items(), key=lambda kv: -kv[1].logprob)[:5]
        print(f"  token {i} top logprobs:", [(t, round(v.logprob, 3)) for t, v in top])
    if cache == "25%":
        num_experts = 1 + max(e for _, e in ids_seen)
        low = sum(n for (_, e), n in ids_seen.items() if e < num_experts // 4)
        total = sum(ids_seen.values())
        print(f"  host parts {layer_steps}, missed pairs {missed_pairs} ({missed_pairs / max(layer_steps, 1):.2f} a"
              f" layer step); routed ids below E/4: {low / max(total, 1):.1%} of {total}; distinct (layer, id):"
              f" {len(ids_seen)}")
        print("  most routed:", ids_seen.most_common(12))
        per_id = np.zeros(num_experts)
        for (_, e), n in ids_seen.items():
            per_id[e] += n
        bins = per_id[:num_experts // 16 * 16].reshape(16, -1).sum(1).astype(int)
        print("  routed pairs by id, 16 bins:", bins.tolist())
    llm.close()
    del llm
same = list(tokens["25%"]) == list(tokens["all"])
print("greedy tokens equal:", same)
