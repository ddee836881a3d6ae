"""llama.cpp's quantizer (llama_model_quantize, llama-quantize's code) on a GGUF: IN OUT TYPE (e.g. Q4_K_M)."""
import ctypes, sys
import llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{sys.argv[3]}")
params.nthread = 2
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(params))
print("rc", rc)
