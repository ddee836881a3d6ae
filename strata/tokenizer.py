"""The tokenizer of a model spec, as an HF fast tokenizer, and chat-prompt rendering.

Resolves a spec the way `strata.weights.source.open_source` does (built-in name, .gguf file, HF model
folder), loading only local files. A GGUF tokenizer is rebuilt from the file's `tokenizer.ggml.*`
metadata by `strata.tokenizer_gguf`, whatever the architecture. Specs with no tokenizer (random
weights, a folder saved without tokenizer files, a GGUF without a vocabulary) give None: such models
take prompts as token ids only.
"""

from __future__ import annotations

import os
from typing import Any

from strata.weights.source import BUNDLED_MODELS, DEFAULT_MODEL, bundled_model_path

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def load_tokenizer(spec_or_path: str | None, chat_template: str = ""):
    """-> transformers PreTrainedTokenizerFast, or None when the spec has no tokenizer. `chat_template` (a file or
    the Jinja template itself) replaces the model's own (EngineConfig.chat_template, `--chat-template`)."""
    tokenizer = _load(spec_or_path or DEFAULT_MODEL)
    if chat_template:
        if tokenizer is None:
            raise ValueError(f"--chat-template needs a tokenizer and model {spec_or_path!r} has none")
        tokenizer.chat_template = read_chat_template(chat_template)
    return tokenizer


def read_chat_template(source: str) -> str:
    """A chat template from a file, or `source` itself when it is a Jinja template (it has {{ or {%)."""
    if os.path.isfile(source):
        with open(source, encoding="utf-8") as f:
            text = f.read()
    elif "{{" in source or "{%" in source:
        text = source
    else:
        raise ValueError(f"--chat-template {source!r} is neither a file nor a Jinja template (no {{{{ or {{%)")
    from jinja2 import Environment, TemplateSyntaxError

    try:  # (HF renders with the loop controls extension: {% break %}, {% continue %})
        Environment(extensions=["jinja2.ext.loopcontrols"]).parse(text)
    except TemplateSyntaxError as e:
        raise ValueError(f"--chat-template {source!r} is not a valid Jinja template: {e.message} "
                         f"(line {e.lineno})") from e
    return text


def _load(spec: str):
    if spec.startswith("random:"):
        return None
    if spec in BUNDLED_MODELS:
        spec = bundled_model_path(spec)
    if spec.endswith(".gguf"):
        if not os.path.isfile(spec):
            raise FileNotFoundError(f"GGUF file {spec} does not exist")
        from strata.tokenizer_gguf import load_gguf_tokenizer

        return load_gguf_tokenizer(spec)
    if os.path.isdir(spec):
        if not any(os.path.isfile(os.path.join(spec, name)) for name in _TOKENIZER_FILES):
            return None
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(spec, local_files_only=True)
    raise FileNotFoundError(
        f"model {spec!r} is not a folder, a .gguf file or a known name; pass an HF model folder, a .gguf file, "
        f"random:<shape> or one of: {', '.join(BUNDLED_MODELS)}")


def render_chat(tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                **template_kwargs: Any) -> list[int]:
    """Chat messages -> prompt token ids through the tokenizer's chat template."""
    # Render to text, then encode without adding special tokens: templates write their own BOS,
    # and encoding with add_special_tokens=True would add a second one.
    text = render_chat_text(tokenizer, messages, add_generation_prompt, **template_kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


def render_chat_text(tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                     **template_kwargs: Any) -> str:
    """Chat messages -> the prompt text of the tokenizer's chat template (not yet tokenized)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this tokenizer has no chat template; pass a plain-text prompt or token ids instead "
                         "of chat messages")
    return tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False,
                                         **template_kwargs)
