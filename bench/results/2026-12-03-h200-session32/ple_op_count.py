"""How many aten ops the PLE layer's torch form issues on a decode step (CPU, the tiny Qwen4-Exp of the tests,
float32 and bfloat16): all of them, and those that are not views (each a kernel launch on CUDA). Run from the
repository root: `.venv/bin/python bench/results/2026-12-03-h200-session32/ple_op_count.py`."""
import collections, sys, tempfile
sys.path.insert(0, ".")
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from tests.tiny_models import save_tiny_model
from strata import LLM, SamplingParams
from strata.model.ple import PerLayerEmbedding

VIEWS = {"unsqueeze", "slice", "select", "flatten", "unflatten", "view", "reshape", "transpose", "expand", "permute",
         "squeeze", "t", "detach", "alias", "split", "chunk", "narrow", "unbind", "as_strided", "_unsafe_view"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func).split(".")[1]] += 1
        return func(*args, **(kwargs or {}))


folder = tempfile.mkdtemp()
save_tiny_model("qwen4_exp", folder)
forward = PerLayerEmbedding.forward
for dtype in ("float32", "bfloat16"):
    counts = []

    def counted(self, streams, input_ids, ctx):
        with Count() as c:
            out = forward(self, streams, input_ids, ctx)
        counts.append(c.ops)
        return out

    PerLayerEmbedding.forward = counted
    llm = LLM(folder, dtype=dtype, device="cpu")
    llm.generate([{"prompt_token_ids": [5, 6, 7, 8]}], SamplingParams(max_tokens=3, temperature=0.0))
    PerLayerEmbedding.forward = forward
    ops = counts[-1]  # a decode step's
    real = sum(n for name, n in ops.items() if name not in VIEWS)
    print(f"{dtype}: {sum(ops.values())} aten ops a PLE layer on a decode step, {real} of them not views")
    del llm
