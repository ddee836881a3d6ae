"""A tiny hybrid with an MTP head (qwen3_next, or the family named: qwen3_5_moe, qwen4_exp) on the CPU in float32,
its Gated DeltaNet layers on the Triton kernels in Triton's interpreter: plain decoding and MTP speculation (whose
eager steps of prompts beside verification windows run the two recurrences, session 55's c5868d6) against plain
decoding on the torch path, on test_cuda_graphs' staggered
prompts; prints the requests that part and where, and how many layer steps took the kernels / two recurrences.
Session 56: none part (2 minutes a family on the 2-core VM).

    PYTHONPATH=/tmp/tri:. python tools/gdn_interpreted_engine.py [FAMILY]
    (triton 3.9 in /tmp/tri: pip install --target /tmp/tri triton)
"""
import os
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "1"
sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "tests", sub) for sub in ("", "kernels")]
import torch  # noqa: E402

from strata import LLM, SamplingParams  # noqa: E402
from strata.model import gated_delta_net, ops  # noqa: E402
from test_kernels import _KernelsOnTheCpu  # noqa: E402
from tiny_models import add_random_mtp, save_tiny_model  # noqa: E402

folder = tempfile.mkdtemp()
family = sys.argv[1] if len(sys.argv) > 1 else "qwen3_next"
save_tiny_model(family, folder)
add_random_mtp(folder)
gen = lambda n: torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist()  # noqa: E731
prompts = [(p[:4] * 30)[:n] for p, n in zip(map(gen, range(5, 13)), [16, 40, 17, 100, 30, 24, 50, 20])]
lengths = [20, 6, 12, 9, 15, 4, 10, 8]
MTP = {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}
counts = {"kernel steps": 0, "two recurrences": 0}
in_two = gated_delta_net.GatedDeltaNet._recurrence_in_two


class CountingKernels(_KernelsOnTheCpu):
    def __getattr__(self, name):
        counts["kernel steps"] += name == "causal_conv1d_update"  # one a layer step on the kernels
        return super().__getattr__(name)


def counted_in_two(self, *args, **kwargs):
    counts["two recurrences"] += 1
    return in_two(self, *args, **kwargs)


def greedy(spec: dict | None, max_num_seqs: int, kernels: bool) -> list[list[int]]:
    gated_delta_net.ops = CountingKernels() if kernels else ops
    llm = LLM(folder, dtype="float32", device="cpu", max_num_seqs=max_num_seqs, block_size=4, speculative_config=spec)
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in lengths]
    return [o.outputs[0].token_ids for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]


gated_delta_net.GatedDeltaNet._recurrence_in_two = counted_in_two
reference = greedy(None, 1, False)
for name, spec, kernels in (("plain, kernels", None, True), ("mtp, kernels", MTP, True), ("mtp, torch", MTP, False)):
    counts.update({key: 0 for key in counts})
    outs = greedy(spec, 3, kernels)
    apart = [(i, next(p for p, (a, b) in enumerate(zip(x, y)) if a != b))
             for i, (x, y) in enumerate(zip(reference, outs)) if x != y]
    print(f"{family}, {name}: {counts}; (request, token) apart from one-at-a-time plain decoding on the torch path: "
          f"{apart}", flush=True)
