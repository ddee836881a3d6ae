"""Graphs under a split with batch groups: a model's tiny random weights in bf16 on two stages sharing one card,
by speculation (none, MTP k=3), four arms: one process eager / with graphs, two stages with two batch groups
eager / with graphs. Prints which pairs of arms differ (request, first differing token):
- split graphs vs split eager: a graph replay under the split reads or writes what it should not;
- one graphs vs one eager: replays round other than eager steps in one process;
- split eager vs one eager: batch groups change the batches, and so bf16 rounding (no bug by itself).
Usage: python3 split_graph_bisect.py [qwen4_exp|qwen3_next|llama ...]"""
import os
import sys
import tempfile

sys.path[:0] = ["tests", "tests/runner"]
os.environ["STRATA_PIPELINE_SHARE_GPUS"] = "1"
from test_pipeline import prompts, run  # noqa: E402
from tiny_models import add_random_mtp, save_tiny_model  # noqa: E402

MTP = {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}


def differing(one: list, two: list) -> list:
    return [(i, next((j for j, (a, b) in enumerate(zip(x, y)) if a != b), min(len(x), len(y))))
            for i, (x, y) in enumerate(zip(one, two)) if x != y]


for family in sys.argv[1:] or ["qwen4_exp"]:
    folder = tempfile.mkdtemp()
    save_tiny_model(family, folder)
    add_random_mtp(folder)
    batch = prompts([23, 11, 40, 17])
    batch.append(batch[0] + [7, 8, 9])
    for spec in (None, MTP):
        arms = {}
        for name, stages, groups, graphs in (("one eager", 1, 1, False), ("one graphs", 1, 1, True),
                                             ("split eager", 2, 2, False), ("split graphs", 2, 2, True)):
            arms[name] = run(folder, stages, spec, batch, num_blocks=40, groups=groups, device="cuda",
                             dtype="bfloat16", graphs=graphs)[0]
        for a, b in (("split graphs", "split eager"), ("one graphs", "one eager"), ("split eager", "one eager"),
                     ("split graphs", "one graphs")):
            bad = differing(arms[a], arms[b])
            print(family, "spec", spec and spec["method"], f"{a} vs {b}:",
                  "same" if not bad else f"DIFF (request, first token) {bad}", flush=True)
