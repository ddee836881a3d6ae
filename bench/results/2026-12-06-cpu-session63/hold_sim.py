"""How admission holds batch successors' prompts at 4 streams with speculation (issue 29's loop, CPU scheduler,
uniform windows as on CUDA): prompt-carrying steps, steps in all, and a cost model's time (decode/verify step D,
a step carrying prompts P)."""
import collections, sys
from strata import LLM
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.bench.offline import run_strata
import strata.engine.core as core
counts = collections.Counter()
orig_plan, orig_launch = core.EngineCore._step_plan, core.EngineCore._launch
def step_plan(self, plan, started):
    prompt = any(w.num_new_tokens > 1 + len(w.draft_token_ids) for w in plan.scheduled)
    counts["prompt" if prompt else "plain"] += 1
    counts["slot_steps"] += len(plan.scheduled)
    return orig_plan(self, plan, started)
def launch(self, kind, plan, inputs_from=None):
    counts["verify"] += 1
    counts["slot_steps"] += len(plan.scheduled)
    return orig_launch(self, kind, plan, inputs_from)
core.EngineCore._step_plan, core.EngineCore._launch = step_plan, launch
spec_json = sys.argv[2] if len(sys.argv) > 2 else '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3,"adaptive":false}'
hold = int(sys.argv[1])
spec = SpecConfig.from_json(spec_json) if spec_json != "none" else SpecConfig()
llm = LLM.from_config(EngineConfig(model="smollm2-135m", runner=RunnerConfig(device="cpu"),
                                   scheduler=SchedulerConfig(max_model_len=1024, max_num_seqs=4, admission_hold_steps=hold),
                                   speculative=spec))
llm.engine.scheduler.uniform_draft_windows = True
prompts = [[100 + (i * 37 + j) % 4000 for j in range(64)] for i in range(32)]
r = run_strata(llm, prompts, 128)
steps = counts["prompt"] + counts["plain"] + counts["verify"]
print(f"hold {hold} spec {spec.method}: tokens {r['output_tokens']} steps {steps} prompt-steps {counts['prompt']} "
      f"mean slots {counts['slot_steps']/steps:.2f}", dict(counts))
