"""The host side of `strata bench offline`'s closed loop at one concurrency: the same engine set-up (built for 16
slots, run at C), prompts (16 x 128 tokens) and runs as the bench, the step split of a run, then cProfile of
the next one (top functions by own and cumulative time; cProfile slows Python ~2x: read the shares).
usage: bench_prof.py MODEL [C]"""
import cProfile
import pstats
import sys

from strata import LLM
from strata.bench.offline import _apply, make_prompts, run_strata
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig

path = sys.argv[1]
concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 8
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16)))
prompts = make_prompts(16, 128, llm.engine.model_config.vocab_size, 0)
_apply(llm, {"max_num_seqs": 16})
run_strata(llm, prompts[:1], 4)
_apply(llm, {"max_num_seqs": concurrency})
for run in range(2):
    result = run_strata(llm, prompts, 128)
    print(f"===== run {run}: {result['output_tok_s']:.1f} tok/s; decode steps (ms): {result['step_split_ms']['decode']}")
prof = cProfile.Profile()
prof.enable()
result = run_strata(llm, prompts, 128)
prof.disable()
print(f"===== profiled: {result['output_tok_s']:.1f} tok/s; decode steps (ms): {result['step_split_ms']['decode']}")
stats = pstats.Stats(prof)
stats.sort_stats("tottime").print_stats(35)
stats.sort_stats("cumulative").print_stats(70)
