"""Parity with HF transformers (the reference) on tiny random models of every family, float32 CPU:
prompt logits (whole and chunked) and greedy tokens through the full engine."""

from __future__ import annotations

import pytest
import torch

from strata import LLM, SamplingParams
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from tiny_models import FAMILIES, build_hf_model, prompt_logits

NEW_TOKENS = 32


def _prompt(length: int, seed: int) -> list[int]:
    return torch.randint(3, 160, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_logits_match_hf(family, tiny_model_dir):
    hf = build_hf_model(family)
    model = build_model(HFSource(tiny_model_dir(family)), "cpu", "float32", quiet=True)
    ids = _prompt(40, seed=1)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert _rel_err(prompt_logits(model, ids), ref) < 1e-4
    assert _rel_err(prompt_logits(model, ids, chunk=7), ref) < 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_matches_hf_generate(family, tiny_model_dir):
    hf = build_hf_model(family)
    llm = LLM(tiny_model_dir(family), dtype="float32", device="cpu", max_num_seqs=4, block_size=8)
    prompts = [_prompt(n, seed=n) for n in (5, 23, 11)]
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    for prompt, out in zip(prompts, outputs):
        ref = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=NEW_TOKENS,
                          output_logits=True, return_dict_in_generate=True)
        ref_tokens = ref.sequences[0, len(prompt):].tolist()
        # peaked logits: every greedy choice wins by a margin far above float32 rounding (~1e-6 here),
        # so the test cannot hinge on a near-tie
        margins = [torch.topk(step[0], 2).values for step in ref.logits]
        assert min((m[0] - m[1]).item() for m in margins) > 1e-4
        assert out.outputs[0].token_ids == ref_tokens
        assert out.outputs[0].finish_reason == "length"
