"""Strata's tokenizer rebuilt from each vocab-only GGUF against llama.cpp's ids (from llama_ids.json)."""
import json, sys
sys.path.insert(0, "/tmp/tok")
from texts import TEXTS
from strata.tokenizer_gguf import read_vocab, build_tokenizer
llama = json.load(open("/tmp/tok/llama_ids.json"))
bad = 0
for pre, ids in llama.items():
    tok = build_tokenizer(read_vocab(f"/tmp/tok/{pre}.gguf"))
    for text, ref in zip(TEXTS, ids):
        mine = tok.encode(text, add_special_tokens=False)
        if mine != ref:
            bad += 1
            print(f"{pre}: {text[:40]!r}\n  strata {mine[:24]}\n  llama  {ref[:24]}")
print("mismatches", bad, "of", len(llama) * len(TEXTS))
