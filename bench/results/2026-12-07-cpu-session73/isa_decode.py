"""One stream of a GGUF on the CPU, the quantized kernels' AVX2 table against the AVX-512 one (cpu_quant.set_isa in
this process), alternated ROUNDS times: a 64-token prompt's 1-token generate and its 65-token generate; decode ms a
token from their difference.

    python isa_decode.py FILE [ROUNDS] [STREAMS]
"""
import sys, time
from strata import LLM, SamplingParams
from strata.kernels import cpu_quant

path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
streams = int(sys.argv[3]) if len(sys.argv) > 3 else 1
llm = LLM(path, device="cpu", max_num_seqs=streams, max_model_len=2048, enable_prefix_caching=False)
prompts = [{"prompt_token_ids": [(7 * i + 13 * s) % 4000 + 3 for i in range(64)]} for s in range(streams)]
one, many = (SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (1, 33))
llm.generate(prompts, many)  # warm-up
tokens = {}
for r in range(rounds):
    for isa in ("avx2", "avx512"):
        cpu_quant.set_isa(isa)
        started = time.perf_counter()
        llm.generate(prompts, one)
        first = time.perf_counter() - started
        started = time.perf_counter()
        out = llm.generate(prompts, many)
        total = time.perf_counter() - started
        tokens.setdefault(isa, [o.outputs[0].token_ids for o in out])
        print(f"round {r + 1} {isa}: prompt + 1 token {first * 1e3:.0f} ms, decode {(total - first) / 32 * 1e3:.1f} ms a step"
              f" ({streams} streams)", flush=True)
print("same tokens:", tokens["avx2"] == tokens["avx512"])
