"""Per-step log of the offline bench (synthetic L=2.0 vs none): each step's slots, tokens, graph path
(graph keys replayed / eager), wall and phases. Usage: python spec_steps.py OUT_JSONL -- <bench offline args>"""
import json, sys, time
from collections import defaultdict
import strata.runner.model_runner as mr
from strata.runner.cuda_graphs import CudaGraphCache
from strata.scheduler.stats import StepTimes

out = open(sys.argv[1], "w")
path: list = []
_run = CudaGraphCache.run
def run(self, key, scheduled, *a, **k):
    path.append(f"g{key[0]}x{key[1]}")
    return _run(self, key, scheduled, *a, **k)
CudaGraphCache.run = run
_build = mr.build_inputs
def build_inputs(scheduled, *a, **k):
    path.append(f"eager{sum(w.num_new_tokens for w in scheduled)}")
    return _build(scheduled, *a, **k)
mr.build_inputs = build_inputs
_cap = CudaGraphCache._capture
def capture(self, key):
    path.append(f"CAPTURE{key}")
    return _cap(self, key)
CudaGraphCache._capture = capture
_record = StepTimes.record
def record(self, plan, result, wall):
    _record(self, plan, result, wall)
    sched = plan.scheduled
    prompts = [w.num_new_tokens for w in sched if not w.sample or w.num_computed_tokens == 0 or w.num_new_tokens > 8]
    wins = [w.num_new_tokens for w in sched if w.num_new_tokens <= 8 and w.num_computed_tokens > 0]
    rec = {"run": id(self), "t": time.perf_counter(), "slots": len(sched), "prompts": prompts,
           "wins": sorted(set(wins)), "nwin": len(wins), "path": list(path), "wall": wall,
           "fwd": result.forward_seconds if result else 0, "smp": result.sample_seconds if result else 0,
           "drf": result.draft_seconds if result else 0,
           "committed": sum(len(s.token_ids) for s in result.slots) if result else 0}
    out.write(json.dumps(rec) + "\n")
    path.clear()
StepTimes.record = record
from strata.cli.main import main
sys.exit(main(sys.argv[3:]))
