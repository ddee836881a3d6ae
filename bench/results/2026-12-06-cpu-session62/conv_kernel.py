"""Session 62, CPU: the Gated DeltaNet causal conv alone, native (kernels/cpu_gdn.conv_windows) against its torch form
(STRATA_TORCH_CPU_CONV=1), through model/gated_delta_net.causal_conv1d_ragged: Qwen3-Next's 8,192 channels, width 4;
4 decode tokens of 4 sequences, and a 256-token prompt. Run from the repository root: PYTHONPATH=. python conv_kernel.py"""
import os
import time
from types import SimpleNamespace

import torch

from strata.model.gated_delta_net import causal_conv1d_ragged


def ctx(lens):
    starts = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    return SimpleNamespace(state_slot_ids=torch.arange(len(lens)), query_start_loc=starts,
                           has_initial_state=torch.ones(len(lens), dtype=torch.bool), keep_window_states=False,
                           real_query_lens=None, num_seqs=len(lens), query_lens=tuple(lens), cached=lambda k, b: b())


weight, state = torch.randn(8192, 4), torch.randn(8, 8192, 3)
for name, lens, reps in (("4 decode tokens", [1, 1, 1, 1], 200), ("256-token prompt", [256], 20)):
    x, c = torch.randn(sum(lens), 8192), ctx(lens)
    for arm in ("native", "torch"):
        os.environ.pop("STRATA_TORCH_CPU_CONV", None)
        if arm == "torch":
            os.environ["STRATA_TORCH_CPU_CONV"] = "1"
        for _ in range(3):
            causal_conv1d_ragged(x, weight, state, c)
        t = time.perf_counter()
        for _ in range(reps):
            causal_conv1d_ragged(x, weight, state, c)
        print(f"{name:18s} {arm:6s} {(time.perf_counter() - t) / reps * 1e6:9.1f} us")
