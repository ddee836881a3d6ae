"""Weights as loaded and device experts of `random:qwen3-next-80b-a3b` at Q4_K_M on a 24 GiB card with 64 GiB of
host RAM, the engine's plan at its default settings (tests/runner/test_memory_plan.py's setting). Run from the
repository root: `.venv/bin/python bench/results/2026-12-04-cpu-session38/plan80.py`."""
import sys

import pytest
import torch

sys.path[:0] = ["tests/runner", "tests"]
from test_memory_plan import _plan_on_card  # noqa: E402
from strata.weights.loaded_sizes import scheme_sizes  # noqa: E402

spec = "random:qwen3-next-80b-a3b"
sizes = scheme_sizes(spec, "q4_k_m", torch.bfloat16)
plan, meta = _plan_on_card(pytest.MonkeyPatch(), spec, 24, 64)
plan.expert_slots(meta, sizes)
print(f"Q4_K_M: weights {sizes.total / 2**30:.2f} GiB (experts {sizes.experts / 2**30:.2f}, other "
      f"{(sizes.total - sizes.experts) / 2**30:.2f}); device experts {plan.auto_expert_slots} of {sizes.num_experts}")
