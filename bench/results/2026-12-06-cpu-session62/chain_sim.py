"""Session 62: how often the engine's chain of verification steps planned ahead restarts, on the CPU scheduler driven by
issue 29's bench loop (run_strata: 32 prompts of 64 tokens, 128 out, 4 streams; synthetic L = 3, k = 3 fixed) with
uniform windows forced (as CUDA graphs take them), on the bundled smollm2. Counts each launch: ('verify', 'ahead' or
'first', slots) and steps run one at a time ('plain-step', slots, window kinds). Run from a tree's root:
PYTHONPATH=. python chain_sim.py"""
import collections
from strata import LLM
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.bench.offline import run_strata
import strata.engine.core as core
counts = collections.Counter()
orig_plan, orig_launch = core.EngineCore._step_plan, core.EngineCore._launch
def step_plan(self, plan, started):
    kinds = tuple(sorted({("prompt" if w.num_new_tokens > 1 + len(w.draft_token_ids) else f"w{1+len(w.draft_token_ids)}") for w in plan.scheduled}))
    counts[("plain-step", len(plan.scheduled), kinds, "waiting" if self.scheduler.waiting else "")] += 1
    return orig_plan(self, plan, started)
def launch(self, kind, plan, inputs_from=None):
    counts[(kind, "ahead" if inputs_from is not None else "first", len(plan.scheduled))] += 1
    return orig_launch(self, kind, plan, inputs_from)
core.EngineCore._step_plan, core.EngineCore._launch = step_plan, launch
spec = SpecConfig.from_json('{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3,"adaptive":false}')
llm = LLM.from_config(EngineConfig(model="smollm2-135m", runner=RunnerConfig(device="cpu"),
                                   scheduler=SchedulerConfig(max_model_len=1024, max_num_seqs=4), speculative=spec))
llm.engine.scheduler.uniform_draft_windows = True
prompts = [[100 + (i * 37 + j) % 4000 for j in range(64)] for i in range(32)]
r = run_strata(llm, prompts, 128)
print("tokens", r["output_tokens"], "steps", sum(counts.values()))
for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:16]: print(v, k)
