import json, sys
sys.path.insert(0, "/tmp/tok")
from texts import TEXTS
from llama_cpp import Llama
out = {}
for pre in sys.argv[1:]:
    l = Llama(model_path=f"/tmp/tok/{pre}.gguf", vocab_only=True, verbose=False)
    out[pre] = [l.tokenize(t.encode(), add_bos=False, special=True) for t in TEXTS]
json.dump(out, open("/tmp/tok/llama_ids.json", "w"))
