"""The host side of `strata bench offline`'s closed loop at one concurrency: the same engine set-up (built for 16
slots, run at C), prompts and runs as the bench, the step split of a run (decode steps, and the steps that carry
prompts: all steps less the decode ones), then cProfile of the next one (top functions by own and cumulative
time; cProfile slows Python ~2x: read the shares). Options: spec=JSON (a speculative config, e.g. issue 28's
synthetic L = 3, k = 3), prompts=N (16), input=N (128), output=N (128).
usage: bench_prof.py MODEL [C] [spec=JSON] [prompts=16] [input=128] [output=128]"""
import cProfile
import pstats
import sys

from strata import LLM
from strata.bench.offline import _apply, make_prompts, run_strata
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig

path = sys.argv[1]
concurrency = int(sys.argv[2]) if len(sys.argv) > 2 and "=" not in sys.argv[2] else 8
opts = dict(a.split("=", 1) for a in sys.argv[2:] if "=" in a)
spec = {"speculative": SpecConfig.from_json(opts["spec"])} if "spec" in opts else {}
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16), **spec))
prompts = make_prompts(int(opts.get("prompts", 16)), int(opts.get("input", 128)), llm.engine.model_config.vocab_size, 0)
output_len = int(opts.get("output", 128))
_apply(llm, {"max_num_seqs": 16})
run_strata(llm, prompts[:1], 4)
_apply(llm, {"max_num_seqs": concurrency})


def split(result: dict) -> str:
    """Mean ms a step of decode steps and of prompt-carrying ones (all less decode): wall, forward, sample, draft,
    host (the bench's step_split_ms holds each kind's means and step count)."""
    every, decode = result["step_split_ms"]["all"], result["step_split_ms"]["decode"]
    prompt_steps = every["num_steps"] - decode["num_steps"]
    phases = ("wall", "forward", "sample", "draft", "host")
    prompt = {p: (every[p] * every["num_steps"] - decode[p] * decode["num_steps"]) / max(prompt_steps, 1)
              for p in phases}
    return "; ".join(f"{name}: {steps} steps, ms a step " + ", ".join(f"{p} {means[p]:.2f}" for p in phases)
                     for name, steps, means in (("decode", decode["num_steps"], decode),
                                                ("prompt-carrying", prompt_steps, prompt)))


for run in range(2):
    result = run_strata(llm, prompts, output_len)
    print(f"===== run {run}: {result['output_tok_s']:.1f} tok/s; {split(result)}")
prof = cProfile.Profile()
prof.enable()
result = run_strata(llm, prompts, output_len)
prof.disable()
print(f"===== profiled: {result['output_tok_s']:.1f} tok/s; {split(result)}")
stats = pstats.Stats(prof)
stats.sort_stats("tottime").print_stats(35)
stats.sort_stats("cumulative").print_stats(70)
