# session 19: CPU_MATMUL=exact|int8 picks --cpu-matmul for the strata arm (default exact)
"""Single-stream greedy decode of the bundled SmolLM2-135M Q4_1 GGUF, float32 on the CPU (2 threads):
strata's LLM API or HF transformers' generate on the same file. Prints JSON: load RSS growth, best-of-3 time
for 128 new tokens, the tokens."""
import json, os, resource, sys, time

def maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

import torch
torch.set_num_threads(2)
from strata.weights.source import bundled_model_path
path = str(bundled_model_path("smollm2-135m"))
mode, new_tokens = sys.argv[1], 128
chat = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
result = {"mode": mode, "file_mb": os.path.getsize(path) / 2**20}
if mode == "strata":
    from strata import LLM, SamplingParams
    from strata.kernels import cpu_quant
    cpu_quant.supports(8)  # build / load the native library before the baseline
    base = maxrss_mb()
    llm = LLM(dtype="float32", device="cpu", max_num_seqs=1, max_model_len=int(os.environ.get("MAX_LEN", "8192")),
              cpu_matmul=os.environ.get("CPU_MATMUL", "exact"))
    result["load_maxrss_delta_mb"] = maxrss_mb() - base
    prompt = llm.encode_chat(chat)
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    run = lambda: llm.generate({"prompt_token_ids": prompt}, params)[0].outputs[0].token_ids
else:
    from transformers import AutoModelForCausalLM
    from strata.tokenizer import load_tokenizer, render_chat
    prompt = render_chat(load_tokenizer(path), chat)
    base = maxrss_mb()
    folder, name = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    result["load_maxrss_delta_mb"] = maxrss_mb() - base
    ids = torch.tensor([prompt])
    def run():
        with torch.inference_mode():
            out = model.generate(ids, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=2)
        return out[0, len(prompt):].tolist()
result["prompt_tokens"] = len(prompt)
run()  # warm-up (the dense fallback makes its float32 copies here)
result["after_first_generate_maxrss_delta_mb"] = maxrss_mb() - base
times = []
for _ in range(3):
    start = time.perf_counter()
    tokens = run()
    times.append(time.perf_counter() - start)
assert len(tokens) == new_tokens
result.update(best_s=min(times), times_s=times, tok_per_s=new_tokens / min(times), rss_now_mb=rss_mb(), tokens=tokens)
print(json.dumps(result))
