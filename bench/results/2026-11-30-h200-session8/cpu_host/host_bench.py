"""Host time per engine step with the model's forward stubbed out (CPU): speculation (synthetic L=2, k=3)
against none, at 16 and 32 slots, 64-token prompts, 96 output tokens."""
import cProfile, pstats, sys, time, tempfile, io
sys.path.insert(0, ".")
import torch
from tests.tiny_models import save_tiny_model
from strata import LLM, SamplingParams
folder = tempfile.mkdtemp()
save_tiny_model("qwen3_moe", folder)
prof = "--prof" in sys.argv
for slots in (16, 32):
    for name, sc in (("nospec", None), ("spec", {"method": "synthetic", "acceptance_length": 2.0, "num_speculative_tokens": 3})):
        llm = LLM(folder, dtype="float32", device="cpu", max_num_seqs=slots, block_size=16, speculative_config=sc)
        model = llm.engine.runner.model
        D, V = 64, 160
        model.forward = lambda input_ids, ctx: torch.zeros(input_ids.shape[0], D)
        model.compute_logits = lambda h: torch.zeros(h.shape[0], V)
        prompts = [{"prompt_token_ids": [(i * 7 + j) % 150 + 3 for j in range(64)]} for i in range(slots)]
        params = SamplingParams(temperature=0.0, max_tokens=96, ignore_eos=True)
        llm.generate(prompts, params)
        best = None
        for _ in range(3):
            core = llm.engine
            steps0 = getattr(core, "num_steps", None)
            pr = cProfile.Profile() if prof else None
            t = time.perf_counter()
            if pr: pr.enable()
            outs = llm.generate(prompts, params)
            if pr: pr.disable()
            wall = time.perf_counter() - t
            toks = sum(len(o.outputs[0].token_ids) for o in outs)
            best = wall if best is None else min(best, wall)
        print(f"slots={slots} {name}: {best*1e3:.1f} ms for {toks} tokens, {best*1e6/toks:.1f} us/token")
        if pr:
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[:3500])
        del llm
