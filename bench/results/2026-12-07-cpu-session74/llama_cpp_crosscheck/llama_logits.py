"""llama.cpp (llama-cpp-python) on a GGUF: the prompt's last-position logits and 32 greedy tokens, as JSON."""
import json, sys
import numpy as np
from llama_cpp import Llama
path, prompt = sys.argv[1], json.loads(sys.argv[2])
llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
llm.eval(prompt)
prompt_logits = np.array(llm.scores[:len(prompt)])            # [T, V]
tokens = []
for _ in range(32):
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    tokens.append(tok)
    llm.eval([tok])
np.save(sys.argv[3], prompt_logits)
print(json.dumps(tokens))
