"""A tiny random model that thinks: a byte-level tokenizer (one token per byte, no merges) with ChatML
specials, `<think>` and `</think>` as added tokens and a Qwen3-style template whose generation prompt opens a
thinking block (or writes an empty one with enable_thinking=False), over a tiny_models llama whose LM head
can only ever pick ASCII letters and digits (every other row is zero, below the random rows' maximum). So
greedy output never writes `</think>`, EOS or whitespace on its own: a test sees exactly what a reasoning
budget forces, and the reasoning text has one character per token."""

from __future__ import annotations

import string

import torch
import transformers

from tiny_models import _CONFIGS, hf_config

TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}")
FREE_CHARS = string.ascii_letters + string.digits


def thinking_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    byte_chars = sorted(pre_tokenizers.ByteLevel.alphabet())  # 256 characters, one per byte
    backend = Tokenizer(BPE({c: i for i, c in enumerate(byte_chars)}, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    backend.add_tokens([AddedToken("<think>", special=False), AddedToken("</think>", special=False)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>",
                                                pad_token="<|endoftext|>", chat_template=TEMPLATE)


def save_thinking_model(folder: str, seed: int = 0) -> str:
    tokenizer = thinking_tokenizer()
    tokenizer.save_pretrained(folder)
    config = hf_config("llama", max_position_embeddings=4096)
    config.vocab_size = len(tokenizer)
    config.bos_token_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config.eos_token_id = tokenizer.eos_token_id
    torch.manual_seed(seed)
    model = getattr(transformers, _CONFIGS["llama"][1])(config).eval()
    free = {tokenizer.convert_tokens_to_ids(c) for c in FREE_CHARS}
    with torch.no_grad():
        for token_id in range(config.vocab_size):
            if token_id not in free:
                model.lm_head.weight[token_id] = 0.0
    model.save_pretrained(folder)
    return folder
