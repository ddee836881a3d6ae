"""llama.cpp's pre-tokenizer names (a GGUF's `tokenizer.ggml.pre`) -> the regexes its merges were learned on, as
rules: the splits applied in turn, whole-token matches, the BOS default, NFC first. Read by tokenizer_gguf (a GGUF's
tokenizer rebuilt) and gguf_export (a tokenizer.json named for llama.cpp)."""

from __future__ import annotations

from dataclasses import dataclass

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}"
          rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizerRule:
    splits: tuple[str, ...]  # applied in turn, each splitting the pieces of the one before (llama.cpp)
    ignore_merges: bool = False  # a piece that is a whole token is taken as is (Llama-3, Tekken)
    add_bos: bool = False  # llama.cpp's default when the file has no add_bos_token
    nfc: bool = False  # the HF reference tokenizer NFC-normalizes first (Qwen); llama.cpp does not


_PRE_GROUPS = (
    (("default",), PreTokenizerRule((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))),
    (("gpt-2", "phi-2", "mpt", "olmo", "exaone4"), PreTokenizerRule((_GPT2,))),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
     PreTokenizerRule((r"\p{N}", _GPT2))),
    (("qwen2", "deepseek-r1-qwen"), PreTokenizerRule((_QWEN2,), nfc=True)),
    (("stablelm2", "megrez", "hunyuan"), PreTokenizerRule((_QWEN2,))),
    (("qwen35",), PreTokenizerRule((_QWEN35,), nfc=True)),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "lfm2"),
     PreTokenizerRule((_LLAMA3,), ignore_merges=True, add_bos=True)),
    (("dbrx", "smaug-bpe", "chatglm-bpe", "glm4"), PreTokenizerRule((_LLAMA3,))),
    (("gpt-4o", "llama4", "minimax-m2"), PreTokenizerRule((_GPT4O,))),
    (("tekken",), PreTokenizerRule((_TEKKEN,), ignore_merges=True, add_bos=True)),
)
PRE_TOKENIZERS = {name: pre for names, pre in _PRE_GROUPS for name in names}
