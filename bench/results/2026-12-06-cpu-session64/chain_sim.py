"""Chains of steps planned ahead at 4 streams with speculation (issue 29's bench loop on the CPU scheduler, uniform
windows as CUDA graphs take them): prompt-carrying steps, verification steps launched first of a chain (the host
read the step before) and planned ahead (launched before it), and anything left in flight after the run.
Run from a tree's root: PYTHONPATH=. python bench/results/2026-12-06-cpu-session64/chain_sim.py"""
import collections
import time

import strata.engine.core as core
from strata import LLM
from strata.bench.offline import run_strata
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig

counts = collections.Counter()
step_plan, launch = core.EngineCore._step_plan, core.EngineCore._launch


def counted_plan(self, plan, started):
    prompt = any(w.num_new_tokens > 1 + len(w.draft_token_ids) for w in plan.scheduled)
    counts["prompt" if prompt else "plain"] += 1
    return step_plan(self, plan, started)


def counted_launch(self, kind, plan, inputs_from=None):
    counts["ahead" if inputs_from is not None else "chain_start"] += 1
    return launch(self, kind, plan, inputs_from)


core.EngineCore._step_plan, core.EngineCore._launch = counted_plan, counted_launch
spec = SpecConfig.from_json('{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3,"adaptive":false}')
llm = LLM.from_config(EngineConfig(model="smollm2-135m", runner=RunnerConfig(device="cpu"),
                                   scheduler=SchedulerConfig(max_model_len=1024, max_num_seqs=4, async_scheduling=True),
                                   speculative=spec))
llm.engine.scheduler.uniform_draft_windows = True
prompts = [[100 + (i * 37 + j) % 4000 for j in range(64)] for i in range(32)]
started = time.perf_counter()
result = run_strata(llm, prompts, 128)
print(f"tokens {result['output_tokens']} steps {sum(counts.values())} {dict(counts)} "
      f"left in flight {llm.engine._ahead is not None} ({time.perf_counter() - started:.0f} s)")
