"""Where a single-stream decode step's time goes. `python3 step_anatomy.py MODEL OUT_PREFIX` prints:
- the engine's step: (wall of 257 tokens - wall of 1 token) / 256, graphs on;
- the device's step: back-to-back replays of the one-slot decode graph, alone and with the LM head and argmax;
their difference is host time the engine does not hide. It also writes chrome traces (OUT_PREFIX.graph.json:
three graph-replayed decode steps; OUT_PREFIX.eager.json: three eager ones) for the kernel order and the
device's idle gaps; OUT_PREFIX "-" writes none."""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig
from strata.kernels.argmax import argmax

path, prefix = sys.argv[1], sys.argv[2]
prompt = {"prompt_token_ids": list(range(100, 164))}


def params(n):
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


def build(graphs):
    return LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda", cuda_graphs=graphs),
                                        scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16)))


def wall(llm, n):
    torch.cuda.synchronize()
    t = time.perf_counter()
    llm.generate([prompt], params(n))
    torch.cuda.synchronize()
    return time.perf_counter() - t


def device_us(fn, n=200):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / n


llm = build(True)
llm.generate([prompt], params(16))
short, long = min(wall(llm, 1) for _ in range(3)), min(wall(llm, 257) for _ in range(3))
print(f"engine decode step: {(long - short) / 256 * 1e6:8.1f} us  ({256 / (long - short):.1f} tok/s)")
runner = llm.engine.runner
captured = runner.graphs.graphs[(1, 1)]
hidden = captured.hidden[:1]
graph_only = device_us(lambda: captured.graph.replay(1))
with_head = device_us(lambda: (captured.graph.replay(1), argmax(runner.model.compute_logits(hidden))))
head = device_us(lambda: argmax(runner.model.compute_logits(hidden)))
print(f"graph replay      : {graph_only:8.1f} us   (+ LM head and argmax: {with_head:.1f} us; head alone {head:.1f})")
print(f"host not hidden   : {(long - short) / 256 * 1e6 - with_head:8.1f} us a step")
if prefix == "-":
    sys.exit(0)
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    llm.generate([prompt], params(4))
prof.export_chrome_trace(prefix + ".graph.json")
del llm, runner, captured, hidden
torch.cuda.empty_cache()
llm = build(False)
llm.generate([prompt], params(4))
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    llm.generate([prompt], params(4))
prof.export_chrome_trace(prefix + ".eager.json")
