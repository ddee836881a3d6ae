"""Which prompt sets make the tiny Qwen3-Next + MTP model admit fresh prompts beside verification windows in
float32 (the graph-identity test's split path), and do graphs on/off then agree: `mtp_split_probe.py`."""
import sys
import tempfile
import time

import torch

sys.path.insert(0, ".")
from strata import LLM  # noqa: E402
from strata.runner.model_runner import ModelRunner  # noqa: E402
from tests.tiny_models import add_random_mtp, save_tiny_model  # noqa: E402
from tests.runner.test_cuda_graphs import _prompts, _staggered  # noqa: E402

folder = tempfile.mkdtemp()
save_tiny_model("qwen3_next", folder)
add_random_mtp(folder)
seen = []
forward_split = ModelRunner._forward_split
ModelRunner._forward_split = lambda self, plan: (lambda out: (seen.append(out is not None and self._has_windows(plan)),
                                                               out)[1])(forward_split(self, plan))
variants = {"test": ([5, 6, 7, 8, 9, 10, 11, 12], [16, 40, 17, 100, 30, 24, 50, 20], [20, 6, 12, 9, 15, 4, 10, 8]),
            "long_out": ([5, 6, 7, 8, 9, 10, 11, 12], [16, 40, 17, 100, 30, 24, 50, 20], [30, 16, 22, 19, 25, 14, 20, 18]),
            "more": ([5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [16, 40, 17, 60, 30, 24, 50, 20, 33, 45],
                     [24, 8, 14, 9, 18, 6, 12, 10, 7, 5])}
start = time.time()
for name, (seeds, lens, outs) in variants.items():
    prompts = [(p[:4] * 30)[:n] for p, n in zip(_prompts(seeds), lens)]
    runs = {}
    for graphs in (False, True):
        seen.clear()
        llm = LLM(folder, dtype="float32", device="cuda", max_num_seqs=3, block_size=4, cuda_graphs=graphs,
                  speculative_config={"method": "mtp", "num_speculative_tokens": 3, "adaptive": False})
        runs[graphs] = _staggered(llm, prompts, outs)
        print(name, "graphs" if graphs else "eager", "split steps with windows", sum(seen), "of", len(seen),
              "drafts", llm.engine.scheduler.stats.num_draft_tokens, flush=True)
        del llm
        torch.cuda.empty_cache()
    print(name, "equal" if runs[True] == runs[False] else "DIFFER", f"t={time.time() - start:.0f}", flush=True)
