"""Single-stream decode A/B in one process (graphs recaptured per arm): the one-row SwiGLU kernel
(ops.skinny_mlp_on) and the skinny/cuBLAS GEMV switch (ops.SKINNY_MAX_WEIGHT). argv: MODEL [rounds]."""
import sys, time, torch
from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig
from strata.model import ops

path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=8)))
graphs = llm.engine.runner.graphs
skinny_mlp_on, max_weight = ops.skinny_mlp_on, ops.SKINNY_MAX_WEIGHT
arms = {"now": (skinny_mlp_on, max_weight), "no_mlp_kernel": (lambda *a: False, max_weight),
        "skinny_all_gemv": (skinny_mlp_on, 1 << 40), "neither": (lambda *a: False, 1 << 40)}
prompt = {"prompt_token_ids": list(range(100, 164))}
results = {name: [] for name in arms}
for r in range(rounds):
    for name, (mlp_on, weight_max) in arms.items():
        ops.skinny_mlp_on, ops.SKINNY_MAX_WEIGHT = mlp_on, weight_max
        for key in list(graphs.graphs):
            graphs._release(key)
        llm.generate([prompt], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))  # recapture
        torch.cuda.synchronize(); t = time.perf_counter()
        out = llm.generate([prompt], SamplingParams(max_tokens=257, temperature=0, ignore_eos=True))
        torch.cuda.synchronize(); wall = time.perf_counter() - t
        results[name].append(256 / wall)
for name, rates in results.items():
    print(f"{name:>16}: {sorted(rates)[len(rates)//2]:8.1f} tok/s (incl. prefill of 64)  runs {[round(x) for x in rates]}")
