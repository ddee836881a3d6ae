"""Where a single-stream step's host time goes, plain decode against synthetic speculation (L = 3, k = 3), on
a model with CUDA graphs: the step split the engine records, then cProfile of one generate per arm (top
functions by own time and by cumulative time). cProfile slows Python roughly twofold: read the shares.
usage: host_prof.py MODEL [plain|spec ...] [streams=N]"""
import cProfile
import pstats
import sys
import time

import torch

from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig

path = sys.argv[1]
streams = int(next((a.split("=")[1] for a in sys.argv[2:] if a.startswith("streams=")), 1))
arms = [a for a in sys.argv[2:] if not a.startswith("streams=")]
prompts = [{"prompt_token_ids": list(range(100 + i, 164 + i))} for i in range(streams)]
params = SamplingParams(max_tokens=257, temperature=0, ignore_eos=True)
for arm in arms or ("plain", "spec"):
    spec = SpecConfig.from_json('{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}') \
        if arm == "spec" else None
    llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                       scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16),
                                       **({"speculative": spec} if spec else {})))
    for _ in range(2):
        llm.generate(prompts, params)
    llm.engine.step_times.__init__()
    torch.cuda.synchronize()
    t = time.perf_counter()
    llm.generate(prompts, params)
    wall = time.perf_counter() - t
    split = llm.engine.step_times.as_dict()["decode"]
    print(f"===== {arm}, {streams} streams: 256 steps in {wall * 1e3:.1f} ms; decode steps: {split}")
    prof = cProfile.Profile()
    prof.enable()
    llm.generate(prompts, params)
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(60)
    del llm
    torch.cuda.empty_cache()
