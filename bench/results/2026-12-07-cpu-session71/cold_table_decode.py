"""One stream of a small Qwen4-Exp GGUF whose PLE table (1.9 GB of Q5_0 rows, the file's blocks over its map) is out of
the page cache, on the CPU: a 64-token prompt and 32 greedy tokens after evicting the file, then the same in RAM.
ARM `on`: as shipped (page_advice.RowReads); `off`: no advice (madvise unavailable: the map's default read-around,
one fault at a time), the behaviour before session 71. Run each arm in its own process (the advice stays on a map).
Each round runs a new prompt after evicting the file (its n-gram rows are new pages), then the same prompt again
with its pages in RAM (prefix caching off, so the prompt is computed again).

    python cold_table_decode.py FILE on|off [ROUNDS]
"""

import os
import sys
import time

from strata import LLM, SamplingParams, page_advice

path, arm = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
if arm == "off":
    page_advice._madvise = None


def evict():
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


llm = LLM(path, device="cpu", max_num_seqs=1, max_model_len=4096, enable_prefix_caching=False)
params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
prompts = [[(7 * i + 13 * r) % 4000 + 3 for i in range(64)] for r in range(rounds + 1)]
llm.generate([{"prompt_token_ids": prompts[-1]}], params)  # warm-up: native kernels built, first allocations
for r in range(rounds):
    for cold in (True, False):
        if cold:
            evict()
        started = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": prompts[r]}], params)
        seconds = time.perf_counter() - started
        print(f"{arm} round {r + 1} {'evicted' if cold else 'in RAM '}: {seconds * 1e3:8.1f} ms for a 64-token prompt and "
              f"{len(out[0].outputs[0].token_ids)} tokens", flush=True)
