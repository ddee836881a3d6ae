"""A tiny random model that speaks a real tokenizer: a tiny_models family whose vocabulary is the bundled
SmolLM2 tokenizer's (49,152 tokens, ChatML template), saved with that tokenizer as an HF model folder.
What structured output needs to be tested on: text the grammar can read, from a model that knows nothing
(so the constraint, not the model, makes the output valid)."""

from __future__ import annotations

import functools

import torch
import transformers

from tiny_models import _CONFIGS, add_random_mtp, hf_config


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    """The bundled model's tokenizer (rebuilt from the GGUF's metadata: seconds, so once per session)."""
    from strata.tokenizer import load_tokenizer

    return load_tokenizer("smollm2-135m")


def save_tokenized_tiny_model(family: str, folder: str, seed: int = 0, mtp: bool = False) -> str:
    tokenizer = smollm2_tokenizer()
    config = hf_config(family)
    config.vocab_size = len(tokenizer)
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    torch.manual_seed(seed)
    model = getattr(transformers, _CONFIGS[family][1])(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if mtp:
        add_random_mtp(folder)
    return folder
