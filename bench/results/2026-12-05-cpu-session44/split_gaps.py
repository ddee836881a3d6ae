import sys, time
import numpy as np
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig
from strata.engine.core import EngineCore
from strata.types import Request, SamplingParams
mode = sys.argv[1]; stages = int(sys.argv[2])
cfg = EngineConfig(model="smollm2-135m", runner=RunnerConfig(device="cpu", pipeline_parallel_size=stages),
                   scheduler=SchedulerConfig(max_num_seqs=4, async_scheduling=mode == "async"))
core = EngineCore(cfg, quiet=True)
try:
    for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
        core.add_request(Request(f"r{rep}", list(range(10, 42)), SamplingParams(temperature=0, max_tokens=96, ignore_eos=True)))
        stamps = []
        while core.has_unfinished():
            for d in core.step():
                if d.new_token_ids: stamps.append(time.perf_counter())
        g = np.diff(stamps) * 1e3
        print(mode, stages, f"n={len(g)} mean {g.mean():.1f} p50 {np.median(g):.1f} p95 {np.percentile(g,95):.1f} max {g.max():.1f} ms", flush=True)
finally:
    core.close()
