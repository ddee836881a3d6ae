"""One-stream decode A/B of the 8-bit MoE pairs' one-token tilings, in one process (graphs recaptured per arm,
arms alternated a round at a time). argv: MODEL (a packed GGUF) [rounds]. Prints each arm's median tok/s over
256 decode steps (after a 64-token prompt) and the runs; the greedy tokens of every arm must be the same."""
import sys, time, torch
from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig
from strata.kernels import packed_q8 as pq

path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=8)))
graphs = llm.engine.runner.graphs


def tiling(bn, sb, warps):
    return dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3)


shipped = pq.pair_configs
arms = {  # name -> (gate/up tiling, down tiling) for one token; None: what the commit ships
    "shipped": None,
    "gu4x2w1_dn8x1w1": (tiling(4, 2, 1), tiling(8, 1, 1)),
    "gu4x2w1_dn8x2w1": (tiling(4, 2, 1), tiling(8, 2, 1)),
    "gu16x2w1_dn16x2w1": (tiling(16, 2, 1), tiling(16, 2, 1)),
    "gu8x1w2_dn8x1w1": (tiling(8, 1, 2), tiling(8, 1, 1)),
}
prompt = {"prompt_token_ids": list(range(100, 164))}
results, tokens = {name: [] for name in arms}, {}
for r in range(rounds):
    for name, pair in arms.items():
        pq.pair_configs = shipped if pair is None else (
            lambda n, q2, pair=pair: pair if n == 1 else shipped(n, q2))
        for key in list(graphs.graphs):
            graphs._release(key)
        llm.generate([prompt], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))  # recapture
        torch.cuda.synchronize(); t = time.perf_counter()
        out = llm.generate([prompt], SamplingParams(max_tokens=257, temperature=0, ignore_eos=True))
        torch.cuda.synchronize(); wall = time.perf_counter() - t
        results[name].append(256 / wall)
        tokens.setdefault(name, out[0].outputs[0].token_ids)
pq.pair_configs = shipped
for name, rates in results.items():
    same = tokens[name] == tokens["shipped"]
    print(f"{name:>20}: {sorted(rates)[len(rates)//2]:8.1f} tok/s (incl. prefill of 64)  runs {[round(x) for x in rates]}"
          f"  tokens {'same' if same else 'DIFFER'}")
