"""One stream of a Qwen4-Exp GGUF on the CPU with its hyper-connection mixers and PLE projections kept as the file's
blocks (ARM `packed`, as shipped since session 72) or dequantized to float32 at load (`dense`, the behaviour before):
a 64-token prompt's 1-token generate and its 65-token generate, ROUNDS times; decode ms a token from their
difference, and the process's resident memory after loading. Run each arm in its own process.

    python hc_packed_decode.py FILE packed|dense [ROUNDS]
"""

import re
import sys
import time

from strata import LLM, SamplingParams
from strata.model import packed

path, arm = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
if arm == "dense":
    packed._DENSE_ON_GPU_NAMES = re.compile(r"(?!)")  # nothing matches: dequantized at load


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


llm = LLM(path, device="cpu", max_num_seqs=1, max_model_len=4096, enable_prefix_caching=False)
print(f"{arm}: resident {rss_mib():.0f} MiB after loading", flush=True)
prompt = {"prompt_token_ids": [(7 * i) % 4000 + 3 for i in range(64)]}
one, many = (SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (1, 65))
llm.generate([prompt], many)  # warm-up
for r in range(rounds):
    started = time.perf_counter()
    llm.generate([prompt], one)
    first = time.perf_counter() - started
    started = time.perf_counter()
    out = llm.generate([prompt], many)
    total = time.perf_counter() - started
    decode = (total - first) / 64
    print(f"{arm} round {r + 1}: prompt + 1 token {first * 1e3:.0f} ms, decode {decode * 1e3:.1f} ms a token", flush=True)
print(f"{arm} tokens {out[0].outputs[0].token_ids[:12]}")
