"""The adaptive draft length at 4 streams (or STREAMS; 1 and 2 streams run 8 and 16 prompts) on the CPU scheduler
(issue 29's bench loop, synthetic acceptance 3.0, k up to 3, uniform windows as CUDA graphs take them), its cost
model fed GPU-like step times in place of the CPU's:
a decode or verification step of R token rows takes 2.8 ms + 0.012 ms x R (weight-bound, as session 65's H100
steps of Qwen4-Exp 4L: ~2.9 ms at 16 rows), times (1 + 5 % noise). Prints the run's decode steps, busy slots and
token rows a step, and the share of steps at each draft length, against k fixed at 3.
Run from a tree's root: PYTHONPATH=. python bench/results/2026-12-07-cpu-session65/adaptive_sim.py [STREAMS]"""
import collections
import random
import sys

import strata.spec.planner as planner
from strata import LLM
from strata.bench.offline import run_strata
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig

rng = random.Random(0)
observe = planner.DraftPlanner.observe_step
planner.DraftPlanner.observe_step = lambda self, rows, seconds: observe(
    self, rows, (2.8e-3 + 0.012e-3 * rows) * (1 + rng.gauss(0, 0.05)))
picks = collections.Counter()
best_k = planner.DraftCostModel.best_k


def counted_best_k(self, k_max, acceptances):
    k = best_k(self, k_max, acceptances)
    picks[k] += 1
    return k


planner.DraftCostModel.best_k = counted_best_k
STREAMS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
prompts = [[100 + (i * 37 + j) % 4000 for j in range(64)] for i in range(32 if STREAMS > 2 else 8 * STREAMS)]
for adaptive in (True, False):
    spec = SpecConfig.from_json('{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3,'
                                f'"adaptive":{str(adaptive).lower()}}}')
    llm = LLM.from_config(EngineConfig(
        model="smollm2-135m", runner=RunnerConfig(device="cpu"), speculative=spec,
        scheduler=SchedulerConfig(max_model_len=1024, max_num_seqs=STREAMS, async_scheduling=True,
                                  admission_hold_steps=1)))
    llm.engine.scheduler.uniform_draft_windows = True
    for repeat in range(2):  # the cost model carries over from one run to the next, as in the bench's repeats
        picks.clear()
        result = run_strata(llm, prompts, 128)
        decode = result["step_split_ms"]["decode"]
        print(f"{STREAMS} streams, adaptive {adaptive} run {repeat}: decode steps {decode['num_steps']}, slots {decode['slots_per_step']:.2f}"
              f", rows {decode['tokens_per_step']:.2f} a step; window {result['mean_window_tokens']:.2f}, accepted "
              f"{result['mean_accepted_length']:.2f}; batch k chosen {dict(sorted(picks.items(), key=str))}",
              flush=True)
    del llm
