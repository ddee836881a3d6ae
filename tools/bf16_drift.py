"""How far plain bf16 decoding of a tiny random test model lies from float32 on the CPU (torch path): for
test_cuda_graphs' staggered prompts, the requests whose greedy tokens part from float32's and where, and the
|logprob| differences of the tokens both chose. Session 55's open question was whether an eager GPU run that took
a first token outside plain decoding's top two (a 0.4-nat gap) showed a precision loss of the Triton Gated DeltaNet
kernels; this says how large such gaps are between two correct bf16 computations of these models.

    python tools/bf16_drift.py [family]      (default qwen3_next; any tests/tiny_models.FAMILIES name)
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import torch  # noqa: E402

from strata import LLM, SamplingParams  # noqa: E402
from tiny_models import save_tiny_model  # noqa: E402

family = sys.argv[1] if len(sys.argv) > 1 else "qwen3_next"
folder = tempfile.mkdtemp()
save_tiny_model(family, folder)
gen = lambda n: torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist()  # noqa: E731
prompts = [(p[:4] * 30)[:n] for p, n in zip(map(gen, range(5, 13)), [16, 40, 17, 100, 30, 24, 50, 20])]


def greedy(dtype: str) -> list[tuple[list[int], list[dict]]]:
    llm = LLM(folder, dtype=dtype, device="cpu", max_num_seqs=1, block_size=4)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=2)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], [params] * len(prompts))
    return [(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outs]


def logprob(entry) -> float:
    return getattr(entry, "logprob", entry)


ref, got = greedy("float32"), greedy("bfloat16")
gaps, apart = [], []
for i, ((ref_ids, ref_lp), (ids, lp)) in enumerate(zip(ref, got)):
    for pos, (a, b) in enumerate(zip(ref_ids, ids)):
        if a != b:
            apart.append((i, pos, {t: round(logprob(v), 3) for t, v in ref_lp[pos].items()},
                          {t: round(logprob(v), 3) for t, v in lp[pos].items()}))
            break
        gaps.append(abs(logprob(ref_lp[pos][a]) - logprob(lp[pos][b])))
print(f"{family}: bf16 parts from float32 in {len(apart)} of {len(prompts)} requests; on the {len(gaps)} tokens "
      f"both chose, |logprob difference| mean {sum(gaps) / len(gaps):.4f}, max {max(gaps):.4f}")
for i, pos, ref_top, top in apart:
    print(f"  request {i} token {pos}: float32 top-2 {ref_top}, bf16 top-2 {top}")
