"""llama.cpp's convert_hf_to_gguf.py, with an unknown BPE pre-tokenizer hash read as SmolLM2's (the tiny models
carry the bundled SmolLM2 tokenizer rebuilt from its GGUF)."""
import runpy, sys
L = "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp"
sys.path[:0] = [L, L + "/gguf-py"]
from conversion import base
orig = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return "smollm"
base.TextModel.get_vocab_base_pre = pre
import json, os
if os.environ.get("RAW_CONFIG"):  # config.json as written (transformers' AutoConfig renames layer types)
    base.ModelBase.load_hparams = staticmethod(lambda d, mistral: json.load(open(d / "config.json")))
sys.argv = [L + "/convert_hf_to_gguf.py"] + sys.argv[1:]
runpy.run_path(L + "/convert_hf_to_gguf.py", run_name="__main__")
