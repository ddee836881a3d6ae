"""Admission holds at 4 streams with speculation (issue 29's bench loop on the CPU scheduler, uniform windows as
CUDA graphs take them): the order of steps (verification or prompt-carrying), each request's arrival and prompt
step, for holds of 0-4 steps; then a cost model from session 65's H100 runs of Qwen4-Exp 4L (a verification step
2.9 ms, a prompt-carrying step 11.3 ms, the same with one prompt or several) gives the run's time, the speedup over
none (1,990 ms: session 65's split runs' mean) and TTFT (virtual ms from arrival to the end of its prompt step).
Adaptive draft length off (on the CPU the cost model would learn CPU step times).
Run from a tree's root: PYTHONPATH=. python bench/results/2026-12-07-cpu-session65/hold_sim.py"""
import statistics
import sys

import strata.engine.core as core
from strata import LLM
from strata.bench.offline import run_strata
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig

VERIFY_MS, PROMPT_MS, NONE_MS = 2.9, 11.3, 1990.0
steps, arrival, first = [], {}, {}
engine = None
step_plan, launch, add_request = core.EngineCore._step_plan, core.EngineCore._launch, core.EngineCore.add_request


def record(plan):
    fresh = [w.slot_id for w in plan.scheduled if w.num_computed_tokens == 0]
    steps.append("prompt" if fresh else "verify")
    by_slot = {s.slot_id: s.request_id for s in engine.scheduler.running}
    for slot in fresh:
        first.setdefault(by_slot[slot], len(steps))


def counted_plan(self, plan, started):
    record(plan)
    return step_plan(self, plan, started)


def counted_launch(self, kind, plan, inputs_from=None):
    record(plan)
    return launch(self, kind, plan, inputs_from)


def counted_add(self, request):
    arrival[request.request_id] = len(steps)
    return add_request(self, request)


core.EngineCore._step_plan, core.EngineCore._launch, core.EngineCore.add_request = \
    counted_plan, counted_launch, counted_add
spec = SpecConfig.from_json('{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3,"adaptive":false}')
prompts = [[100 + (i * 37 + j) % 4000 for j in range(64)] for i in range(32)]
for hold in [int(h) for h in sys.argv[1:]] or [0, 1, 2, 3, 4]:
    llm = LLM.from_config(EngineConfig(
        model="smollm2-135m", runner=RunnerConfig(device="cpu"), speculative=spec,
        scheduler=SchedulerConfig(max_model_len=1024, max_num_seqs=4, async_scheduling=True,
                                  admission_hold_steps=hold)))
    engine = llm.engine
    engine.scheduler.uniform_draft_windows = True
    steps.clear(), arrival.clear(), first.clear()
    result = run_strata(llm, prompts, 128)
    clock = [0.0]
    for kind in steps:
        clock.append(clock[-1] + (PROMPT_MS if kind == "prompt" else VERIFY_MS))
    ttft = sorted(clock[first[r]] - clock[arrival[r]] for r in first)
    print(f"hold {hold}: tokens {result['output_tokens']} steps {len(steps)} prompt steps {steps.count('prompt')} "
          f"modelled {clock[-1]:.0f} ms -> {NONE_MS / clock[-1]:.2f}x none; TTFT p50 {statistics.median(ttft):.1f} "
          f"p95 {ttft[int(0.95 * len(ttft))]:.1f} ms; window {result['mean_window_tokens']:.2f} tokens, accepted "
          f"{result['mean_accepted_length']:.2f}, decode steps {result['step_split_ms']['decode']['num_steps']}",
          flush=True)
    del llm, engine
