"""The real bundled GGUF (SmolLM2-135M-Instruct: llama arch, Q4_1 + Q8_0 + F32, tied embeddings): its
config, prompt logits against HF transformers loading the same file, and its tokenizer (strata.tokenizer)."""

from __future__ import annotations

import functools
import json
import os

import gguf
import pytest
import torch

from strata.tokenizer import load_tokenizer, render_chat
from strata.weights.gguf_source import GGUFSource
from strata.weights.loader import build_model
from tiny_models import prompt_logits

SYSTEM_PROMPT = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module", autouse=True)
def shared_gguf_parsing():
    """gguf-py parses the 49k-token vocabulary in ~3 s, and HF's GGUF loaders parse the file on every call
    and rebuild gguf-py's name map once per module (~8 s); all are pure, so this module shares them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "get_tensor_name_map", functools.lru_cache(gguf.get_tensor_name_map))
        patch.setattr(gguf, "GGUFReader", functools.lru_cache(gguf.GGUFReader))
        yield


@pytest.fixture(scope="module")
def source(bundled_gguf):
    return GGUFSource(bundled_gguf)


@pytest.fixture(scope="module")
def tokenizer(bundled_gguf):
    return load_tokenizer(bundled_gguf)


def test_config(source):
    cfg = source.model_config()
    assert (cfg.architecture, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size) == \
        ("LlamaForCausalLM", 30, 576, 1536)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size) == (9, 3, 64, 49152)
    assert (cfg.rope_theta, cfg.rope_scaling, cfg.partial_rotary_factor, cfg.rms_norm_eps) == \
        (100000.0, None, 1.0, 1e-5)
    assert cfg.tie_word_embeddings and (cfg.bos_token_id, cfg.eos_token_ids) == (1, (2,))
    assert cfg.max_position_embeddings == 8192
    assert source.num_tensors() == len(source.reader.tensors) == 272  # no output.weight: tied


def test_prompt_logits_match_hf_transformers(bundled_gguf, source, tokenizer):
    from transformers import AutoModelForCausalLM

    ids = render_chat(tokenizer, [{"role": "user", "content": "What is the capital of France?"}])
    model = build_model(source, "cpu", "float32", quiet=True)
    ours = prompt_logits(model, ids, block_size=16)
    del model
    from fast_gguf import fast_gguf_arrays

    folder, filename = os.path.split(bundled_gguf)
    with fast_gguf_arrays():
        hf = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert ((ours - ref).abs().max() / ref.abs().max()).item() < 1e-3
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


# ---- tokenizer ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["Hello world", "  leading spaces\tand tabs\n", "Ünïcödé — 你好 👋", ""])
def test_tokenizer_round_trips_text(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert tokenizer.encode(text) == ids  # this GGUF says add_bos_token = false


def test_tokenizer_special_tokens(tokenizer):
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.bos_token, tokenizer.bos_token_id) == ("<|im_start|>", 1)
    assert "<|im_start|>" in tokenizer.chat_template


def test_render_chat(tokenizer):
    messages = [{"role": "user", "content": "Hi"}]
    ids = render_chat(tokenizer, messages)
    assert tokenizer.decode(ids) == SYSTEM_PROMPT + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert ids.count(1) == 3 and ids.count(2) == 2  # the markers are single special tokens, not text
    without_prompt = render_chat(tokenizer, messages, add_generation_prompt=False)
    assert tokenizer.decode(without_prompt) == SYSTEM_PROMPT + "<|im_start|>user\nHi<|im_end|>\n"


def test_render_chat_without_template_is_a_clear_error(tokenizer, monkeypatch):
    monkeypatch.setattr(tokenizer, "chat_template", None)
    with pytest.raises(ValueError, match="no chat template"):
        render_chat(tokenizer, [{"role": "user", "content": "Hi"}])


def test_built_in_name_and_saved_folder_give_the_same_tokenizer(tokenizer, tmp_path):
    messages = [{"role": "user", "content": "Name three colours."}]
    expected = render_chat(tokenizer, messages)
    assert render_chat(load_tokenizer("smollm2-135m"), messages) == expected
    assert render_chat(load_tokenizer(None), messages) == expected  # the default model
    tokenizer.save_pretrained(tmp_path)
    assert render_chat(load_tokenizer(str(tmp_path)), messages) == expected


def test_specs_without_a_tokenizer(tmp_path):
    assert load_tokenizer("random:qwen3-30b-a3b") is None
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert load_tokenizer(str(tmp_path)) is None  # a weights-only folder: prompts as token ids
    with pytest.raises(FileNotFoundError, match="missing.gguf does not exist"):
        load_tokenizer(str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match="not a folder, a .gguf file or a known name"):
        load_tokenizer("no-such-model")
