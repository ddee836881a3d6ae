"""Where Qwen4-Exp Q4_K_M decode steps spend device time (4 layers, packed), eager: kernels and the aten ops
that launch them."""
import sys, torch
from torch.profiler import profile, ProfilerActivity
from strata import LLM, SamplingParams
llm = LLM(sys.argv[1], device="cuda", max_num_seqs=1, cuda_graphs=False, max_model_len=1024)
llm.generate([{"prompt_token_ids": list(range(100, 164))}], SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
    llm.generate([{"prompt_token_ids": list(range(200, 264))}], SamplingParams(temperature=0.0, max_tokens=33, ignore_eos=True))
ka = prof.key_averages(group_by_input_shape=True)
print(ka.table(sort_by="self_cuda_time_total", row_limit=45, max_name_column_width=60, max_shapes_column_width=90))
