"""One-stream decode A/B of a STRATA_* debug switch in one process (graphs recaptured per arm, arms alternated a
round at a time): `env_ab.py MODEL NAME [rounds]` runs with STRATA_NAME unset and set to 1, e.g. NO_NORM_ROUTE.
Prints each arm's median tok/s over 256 decode steps after a 64-token prompt, and whether the greedy tokens match."""
import os, sys, time, torch
from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig

path, name = sys.argv[1], "STRATA_" + sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=8)))
graphs = llm.engine.runner.graphs
prompt = {"prompt_token_ids": list(range(100, 164))}
arms = {"unset": None, f"{name}=1": "1"}
results, tokens = {arm: [] for arm in arms}, {}
for r in range(rounds):
    for arm, value in arms.items():
        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        for key in list(graphs.graphs):
            graphs._release(key)
        llm.generate([prompt], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))  # recapture
        torch.cuda.synchronize(); t = time.perf_counter()
        out = llm.generate([prompt], SamplingParams(max_tokens=257, temperature=0, ignore_eos=True))
        torch.cuda.synchronize(); wall = time.perf_counter() - t
        results[arm].append(256 / wall)
        tokens.setdefault(arm, out[0].outputs[0].token_ids)
os.environ.pop(name, None)
for arm, rates in results.items():
    print(f"{arm:>24}: {sorted(rates)[len(rates)//2]:8.1f} tok/s (incl. prefill of 64)  runs {[round(x) for x in rates]}"
          f"  tokens {'same' if tokens[arm] == tokens['unset'] else 'DIFFER'}")
