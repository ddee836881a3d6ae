"""Which part of the failing GPU split test differs from one process: Qwen4-Exp with graphs over two stages sharing
one card, by batch groups (1, 2) and speculation (none, MTP k=3). Prints OK or the first differing request."""
import os
import sys
import tempfile

sys.path[:0] = ["tests", "tests/runner"]
os.environ["STRATA_PIPELINE_SHARE_GPUS"] = "1"
from test_pipeline import prompts, run  # noqa: E402
from tiny_models import add_random_mtp, save_tiny_model  # noqa: E402

folder = tempfile.mkdtemp()
save_tiny_model(sys.argv[1] if len(sys.argv) > 1 else "qwen4_exp", folder)
add_random_mtp(folder)
batch = prompts([23, 11, 40, 17])
batch.append(batch[0] + [7, 8, 9])
MTP = {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}
for spec in (None, MTP):
    one = run(folder, 1, spec, batch, num_blocks=40, device="cuda", dtype="bfloat16", graphs=True)[0]
    for groups in (1, 2):
        two = run(folder, 2, spec, batch, num_blocks=40, groups=groups, device="cuda", dtype="bfloat16", graphs=True)[0]
        bad = [(i, next(j for j, (a, b) in enumerate(zip(x, y)) if a != b)) for i, (x, y) in enumerate(zip(one, two))
               if x != y]
        print(sys.argv[1:] or "qwen4_exp", "spec", spec and spec["method"], "groups", groups,
              "OK" if not bad else f"DIFF (request, first token) {bad}", flush=True)
