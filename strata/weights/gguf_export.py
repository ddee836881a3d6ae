"""`strata quantize`: any model Strata loads (HF folder, GGUF file, random:<shape>) written as a GGUF file in
a quantization scheme (SCHEMES: q2_k, q3_k_m, q4_k_m, q6_k, q8_0, mxfp4_moe, iq4_xs, iq3_xxs, iq2_xxs, f16, bf16,
f32) with a tokenizer, so benchmarks can make a Q4_K_M file of a real model shape in seconds on a GPU. The file
follows llama.cpp's conventions (strata.weights.gguf_writer). Its tokenizer: a GGUF source's tokenizer.* metadata copied, an HF folder's
byte-level BPE tokenizer.json converted, else (random shapes) a synthetic byte-level BPE vocabulary of
exactly vocab_size tokens, with ChatML special tokens, that strata.tokenizer_gguf loads.

Memory: a random model is built on `device` and its tensors quantized there; HF and GGUF sources are streamed
tensor by tensor (twice: shapes, then data) and never built. Host memory holds one tensor's bytes at a time
beyond the model itself (a random model built on the CPU is the one full copy).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import gguf
import torch

from strata.weights.gguf_file import open_reader
from strata.weights.gguf_source import GGUFSource
from strata.weights.gguf_writer import Vocab, llama_cpp_shapes, write_gguf
from strata.weights.hf_source import HFSource
from strata import progress
from strata.weights.loader import build_model
from strata.weights.pre_tokenizers import PRE_TOKENIZERS
from strata.weights.source import open_source

Q = gguf.GGMLQuantizationType
# Strata's fused parameters -> the HF checkpoint tensors they hold, in row order (where the module has
# shard_sizes: Qwen3-Next's in_proj_qkvz / in_proj_ba are its checkpoint's own tensors, Qwen3.5's are not)
_UNFUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
            "in_proj_qkvz": ("in_proj_qkv", "in_proj_z"), "in_proj_ba": ("in_proj_b", "in_proj_a")}
_STACKED_EXPERTS = {"w13": "gate_up_proj", "w2": "down_proj"}  # [E, 2I, D] and [E, D, I], HF's names and layout
_NOT_WEIGHTS = re.compile(r"rotary_emb\.inv_freq$")


# ---- schemes --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    pattern: str  # re.search on the llama.cpp tensor name
    qtype: str
    more_bits_only: bool = False  # only on llama.cpp's "use more bits" layers (use_more_bits)
    # only where layers(i, n) holds: i the tensor's block of the model's n (an attn_v: its index among the n
    # attn_v tensors, as llama.cpp counts them); never for tensors outside the blocks
    layers: Callable[[int, int], bool] | None = None


@dataclass(frozen=True)
class Scheme:
    """The type of every 2-D weight (`weights`) but those a rule names (the first matching rule wins).
    Always F32, as in llama.cpp: 1-D tensors (norms, biases, ssm_a, ssm_dt), the MoE routers
    (ffn_gate_inp, and Qwen3-Next's shared-expert gate ffn_gate_inp_shexp: a softmax / sigmoid reads small
    differences) and Qwen3-Next's ssm_conv1d [C, 4]. A row length the type's blocks do not divide falls
    back as in llama.cpp's quantizer (`fallback_type`): Q2_K and Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K
    -> Q8_0, the i-quants -> IQ4_NL, then F16 when 32 does not divide it either."""

    name: str
    weights: str
    file_type: gguf.LlamaFileType
    rules: tuple[Rule, ...] = ()


# q4_k_m as llama.cpp's llama_tensor_get_type: Q4_K but the LM head (output, or the tied token_embd) Q6_K,
# attn_v and ffn_down (dense, _exps, _shexp) Q6_K on the use-more-bits layers, Qwen3-Next's fused linear
# attention input attn_qkv Q5_K (llama.cpp's attn_qkv rule); attn_gate, ssm_ba, ssm_out, the shared
# expert's gate/up and the MTP head's eh_proj take the scheme's Q4_K. Not copied: llama.cpp's bumps for
# 8-expert models (attn_k / attn_v Q8_0, attn_output Q5_K) and for 70B-class GQA.
_Q4_K_M = (Rule(r"^output\.weight$", "Q6_K"), Rule(r"\.attn_v\.weight$", "Q6_K", more_bits_only=True),
           Rule(r"\.ffn_down(_exps|_shexp)?\.weight$", "Q6_K", more_bits_only=True),
           Rule(r"\.attn_qkv\.weight$", "Q5_K"))
# q3_k_m and q2_k, the files a 125B model takes to fit 64 GB of RAM, as llama_tensor_get_type: the LM head Q6_K;
# q3_k_m: Q3_K but attn_v Q5_K on the first two attn_v and Q4_K after, ffn_down Q5_K in the first sixteenth of the
# blocks and Q4_K after, attn_output and attn_qkv Q4_K; q2_k: Q2_K but attn_v Q4_K (llama.cpp's choice for 4+ query
# heads a KV head, as every model here has; Q3_K below), ffn_down and attn_output Q3_K. Not copied: the bumps for
# 8-expert models and Falcon.
_Q3_K_M = (Rule(r"^output\.weight$", "Q6_K"), Rule(r"\.attn_v\.weight$", "Q5_K", layers=lambda i, n: i < 2),
           Rule(r"\.attn_v\.weight$", "Q4_K"),
           Rule(r"\.ffn_down(_exps|_shexp)?\.weight$", "Q5_K", layers=lambda i, n: i < n // 16),
           Rule(r"\.(ffn_down(_exps|_shexp)?|attn_output|attn_qkv)\.weight$", "Q4_K"))
_Q2_K = (Rule(r"^output\.weight$", "Q6_K"), Rule(r"\.attn_v\.weight$", "Q4_K"),
         Rule(r"\.(ffn_down(_exps|_shexp)?|attn_output)\.weight$", "Q3_K"))
# mxfp4_moe as llama.cpp's MXFP4_MOE: the routed experts (3-D tensors) MXFP4, every other weight Q8_0
_MXFP4_MOE = (Rule(r"_exps\.weight$", "MXFP4"),)
# the i-quant files as llama_tensor_get_type writes them without an importance matrix (llama.cpp asks for one at
# IQ2_XXS; these test and benchmark files go without): iq4_xs: IQ4_XS but the LM head Q6_K, attn_v Q5_K, ffn_down
# Q5_K in the first eighth of the blocks; iq3_xxs: IQ3_XXS but the LM head Q5_K, token_embd and attn_output IQ3_S,
# attn_q / attn_k IQ2_S, attn_v Q4_K, ffn_down Q4_K in the first eighth and Q3_K after; iq2_xxs: IQ2_XXS but the LM
# head Q5_K, token_embd Q2_K, attn_v Q4_K, ffn_down Q2_K in the first eighth. Not copied: the 8-expert bumps.
_FIRST_EIGHTH = (lambda i, n: i < n // 8)  # noqa: E731
_FFN_DOWN = r"\.ffn_down(_exps|_shexp)?\.weight$"
_IQ4_XS = (Rule(r"^output\.weight$", "Q6_K"), Rule(r"\.attn_v\.weight$", "Q5_K"),
           Rule(_FFN_DOWN, "Q5_K", layers=_FIRST_EIGHTH))
_IQ3_XXS = (Rule(r"^output\.weight$", "Q5_K"), Rule(r"^token_embd\.weight$", "IQ3_S"),
            Rule(r"\.attn_v\.weight$", "Q4_K"), Rule(r"\.attn_[qk]\.weight$", "IQ2_S"),
            Rule(r"\.attn_output\.weight$", "IQ3_S"), Rule(_FFN_DOWN, "Q4_K", layers=_FIRST_EIGHTH),
            Rule(_FFN_DOWN, "Q3_K"))
_IQ2_XXS = (Rule(r"^output\.weight$", "Q5_K"), Rule(r"^token_embd\.weight$", "Q2_K"),
            Rule(r"\.attn_v\.weight$", "Q4_K"), Rule(_FFN_DOWN, "Q2_K", layers=_FIRST_EIGHTH))
SCHEMES = {s.name: s for s in (
    Scheme("q2_k", "Q2_K", gguf.LlamaFileType.MOSTLY_Q2_K, _Q2_K),
    Scheme("q3_k_m", "Q3_K", gguf.LlamaFileType.MOSTLY_Q3_K_M, _Q3_K_M),
    Scheme("q4_k_m", "Q4_K", gguf.LlamaFileType.MOSTLY_Q4_K_M, _Q4_K_M),
    Scheme("q6_k", "Q6_K", gguf.LlamaFileType.MOSTLY_Q6_K),
    Scheme("q8_0", "Q8_0", gguf.LlamaFileType.MOSTLY_Q8_0),
    Scheme("mxfp4_moe", "Q8_0", gguf.LlamaFileType.MOSTLY_MXFP4_MOE, _MXFP4_MOE),
    Scheme("iq4_xs", "IQ4_XS", gguf.LlamaFileType.MOSTLY_IQ4_XS, _IQ4_XS),
    Scheme("iq3_xxs", "IQ3_XXS", gguf.LlamaFileType.MOSTLY_IQ3_XXS, _IQ3_XXS),
    Scheme("iq2_xxs", "IQ2_XXS", gguf.LlamaFileType.MOSTLY_IQ2_XXS, _IQ2_XXS),
    Scheme("f16", "F16", gguf.LlamaFileType.MOSTLY_F16),
    Scheme("bf16", "BF16", gguf.LlamaFileType.MOSTLY_BF16),
    Scheme("f32", "F32", gguf.LlamaFileType.ALL_F32),
)}
_ALWAYS_F32 = re.compile(r"(ffn_gate_inp(_shexp)?|ssm_conv1d)\.weight$")
_BLOCK = re.compile(r"^blk\.(\d+)\.")


def get_scheme(name: str) -> Scheme:
    if name.lower() not in SCHEMES:
        raise ValueError(f"unknown quantization scheme {name!r}; choose one of: {', '.join(SCHEMES)}")
    return SCHEMES[name.lower()]


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's layers that get more bits: the first and last eighth, and every third one between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def choose_types(scheme: Scheme, shapes: list[tuple[str, tuple[int, ...]]], num_layers: int) -> dict[str, Q]:
    """llama.cpp tensor name -> type. attn_v counts its layers among the attn_v tensors (Qwen3-Next has one
    in every fourth block), ffn_down its block among the model's `num_layers`, as llama.cpp does."""
    names = [name for name, _ in shapes]
    attn_v = [name for name in names if name.endswith(".attn_v.weight")]
    types = {}
    for name, shape in shapes:
        if len(shape) < 2 or _ALWAYS_F32.search(name):
            types[name] = Q.F32
            continue
        as_name = "output.weight" if name == "token_embd.weight" and "output.weight" not in names else name
        block = _BLOCK.match(as_name)
        at = ((attn_v.index(as_name), len(attn_v)) if as_name in attn_v
              else (int(block.group(1)), num_layers) if block is not None else None)  # (i, n) of Rule.layers
        more_bits = at is not None and use_more_bits(*at)
        rule = next((r for r in scheme.rules if re.search(r.pattern, as_name) and (more_bits or not r.more_bits_only)
                     and (r.layers is None or (at is not None and r.layers(*at)))), None)
        types[name] = fallback_type(Q[rule.qtype if rule else scheme.weights], shape[-1])
    return types


# llama.cpp's llama_tensor_get_type for a row its type's blocks do not divide (Qwen4-Exp's 640-wide expert down
# rows in a Q4_K_M file are Q5_0, or Q8_0 on the use-more-bits layers); any other type of ours takes Q8_0
_FALLBACKS = {Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0, Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0,
              **{t: Q.IQ4_NL for t in (Q.IQ4_XS, Q.IQ3_S, Q.IQ3_XXS, Q.IQ2_S, Q.IQ2_XXS)}}


def fallback_type(qtype: Q, row: int) -> Q:
    """`qtype`, or what llama.cpp writes instead when its blocks do not divide a row of `row` values (then
    F16 when the fallback's 32-value blocks do not divide it either)."""
    if row % gguf.GGML_QUANT_SIZES[qtype][0] == 0:
        return qtype
    fallback = _FALLBACKS.get(qtype, Q.Q8_0)
    return fallback if row % gguf.GGML_QUANT_SIZES[fallback][0] == 0 else Q.F16


# ---- the model's tensors under HF names ---------------------------------------------------------------

def hf_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A Strata model's parameters under HF checkpoint names and layouts (views, no copies): fused
    projections split by their shard_sizes, stacked experts as HF's mlp.experts.gate_up_proj / down_proj."""
    state = {}
    for name, tensor in model.state_dict().items():
        prefix, _, leaf = name.rpartition(".")
        if leaf in _STACKED_EXPERTS:
            state[f"{prefix}.{_STACKED_EXPERTS[leaf]}"] = tensor
            continue
        module_name, _, fused = prefix.rpartition(".")
        sizes = getattr(model.get_submodule(prefix), "shard_sizes", None) if fused in _UNFUSED else None
        if sizes is not None:
            for part, values in zip(_UNFUSED[fused], tensor.split(list(sizes)), strict=True):
                state[f"{module_name}.{part}.{leaf}"] = values
            continue
        state[name] = tensor
    return state


class _SourceTensors:
    """A weight source's (HF name, tensor) stream, walkable more than once, each tensor on `device`
    (packed GGUF weights dequantized first, when the writer asks for their values)."""

    def __init__(self, source, dtype: torch.dtype, device: str) -> None:
        self.source, self.dtype, self.device = source, dtype, device

    def items(self):
        for name, tensor in self.source.tensors(self.dtype):
            if not _NOT_WEIGHTS.search(name):
                yield name, (tensor.to(self.device) if isinstance(tensor, torch.Tensor) else _Packed(tensor, self.device))


@dataclass(frozen=True)
class _Packed:
    weight: object  # PackedWeight or PackedExpertWeight: .shape and .dequantize(dtype)
    device: str

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        return self.weight.dequantize(dtype).to(self.device)


# ---- tokenizers --------------------------------------------------------------------------------------

T = gguf.TokenType
_CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
           "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# words whose letters the synthetic vocabulary merges (with and without a leading space), so text is not
# all single bytes
_WORDS = ("the", "and", "ing", "tion", "that", "with", "for", "you", "this", "have", "from", "are", "not",
          "def", "return", "self", "import", "class", "print", "true", "false", "none", "in", "is", "it", "to",
          "of", "on", "as", "at", "be", "or", "an", "if", "er", "re", "ed", "es", "en", "al", "st", "ar")


class GGUFTokenizer:
    """A GGUF file's tokenizer.* metadata, copied key by key."""

    def __init__(self, path: str) -> None:
        reader = open_reader(path)
        self.fields = [(name, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY
                        else None) for name, f in reader.fields.items() if name.startswith("tokenizer.")]

    def add_to(self, writer: gguf.GGUFWriter) -> None:
        for name, value, vtype, sub_type in self.fields:
            writer.add_key_value(name, value, vtype, sub_type)


def tokenizer_of(source, hf_config: dict) -> tuple[object, str]:
    """(something with add_to(GGUFWriter), where it came from) for the model of `source`."""
    if isinstance(source, GGUFSource):
        copied = GGUFTokenizer(source.readers[0].path)
        if any(name == "tokenizer.ggml.tokens" for name, *_ in copied.fields):
            return copied, f"copied from {source.path}"
    if isinstance(source, HFSource) and os.path.isfile(os.path.join(source.folder, "tokenizer.json")):
        return hf_vocab(source.folder, hf_config), f"converted from {source.folder}/tokenizer.json"
    return synthetic_vocab(hf_config), f"synthetic byte-level BPE of {hf_config['vocab_size']} tokens"


def synthetic_vocab(cfg: dict) -> Vocab:
    """Exactly vocab_size tokens: <|im_end|> (EOS) and <|endoftext|> (BOS) at the config's ids where they
    fit, <|im_start|>, the 256 byte tokens, merges of a few common words, then [PAD<i>] fillers (unused)."""
    size = cfg["vocab_size"]
    if size < 256 + 3:
        raise ValueError(f"vocab_size {size} is too small for a byte-level vocabulary (256 byte tokens and 3 "
                         f"special ones); use vocab_size >= 259")
    special = _place_special(size, {"<|im_end|>": _first_id(cfg.get("eos_token_id")),
                                    "<|endoftext|>": _first_id(cfg.get("bos_token_id")), "<|im_start|>": None})
    merges = _word_merges(size - 256 - len(special))
    normal = [_BYTE_CHARS[b] for b in range(256)] + [left + right for left, right in merges]
    free = iter(i for i in range(size) if i not in special)
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [T.UNUSED] * size
    for token in normal:
        i = next(free)
        tokens[i], types[i] = token, T.NORMAL
    for i, token in special.items():
        tokens[i], types[i] = token, T.CONTROL
    ids = {token: i for i, token in special.items()}
    return Vocab("gpt2", tokens, types, [f"{a} {b}" for a, b in merges], pre="gpt-2",
                 special_ids={"eos": ids["<|im_end|>"], "bos": ids["<|endoftext|>"]}, add_bos=False,
                 chat_template=_CHATML)


def _first_id(value) -> int | None:
    return value[0] if isinstance(value, list) and value else value if isinstance(value, int) else None


def _place_special(size: int, wanted: dict[str, int | None]) -> dict[int, str]:
    """id -> special token: each at its wanted id where that is in range and free, else the highest free id."""
    placed = {}
    for token, i in wanted.items():
        if i is None or not 0 <= i < size or i in placed:
            i = max(set(range(size - len(wanted), size)) - set(placed))
        placed[i] = token
    return placed


def _gpt2_byte_chars() -> list[str]:
    """GPT-2's byte -> printable character map (byte-level BPE's alphabet): printable Latin-1 bytes stand
    for themselves, the others for 256 + n in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


_BYTE_CHARS = _gpt2_byte_chars()


def _word_merges(budget: int) -> list[tuple[str, str]]:
    """Left-to-right merges that build each of _WORDS (and "Ġ" + word, a leading space), at most `budget`."""
    merges, seen = [], set()
    for word in _WORDS:
        for form in (_BYTE_CHARS[ord(" ")] + word, word):
            for end in range(2, len(form) + 1):
                if form[:end] not in seen and len(merges) < budget:
                    seen.add(form[:end])
                    merges.append((form[:end - 1], form[end - 1]))
    return merges


def hf_vocab(folder: str, cfg: dict) -> Vocab:
    """An HF byte-level BPE tokenizer.json (+ tokenizer_config.json) as llama.cpp's gpt2 vocabulary, padded
    with [PAD<i>] to the model's vocab_size as llama.cpp pads it."""
    with open(os.path.join(folder, "tokenizer.json")) as f:
        data = json.load(f)
    model = data.get("model", {})
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        raise ValueError(f"{folder}/tokenizer.json is not a byte-level BPE tokenizer (model {model.get('type')}, "
                         f"byte_fallback {model.get('byte_fallback')}); strata quantize converts only those: convert "
                         f"this model with llama.cpp's convert_hf_to_gguf.py, then quantize the .gguf")
    ids = dict(model["vocab"])
    added = {t["id"]: t for t in data.get("added_tokens", [])}
    ids.update({t["content"]: i for i, t in added.items()})
    size = cfg["vocab_size"]
    if max(ids.values()) >= size:
        raise ValueError(f"{folder}/tokenizer.json has token id {max(ids.values())}, beyond the model's "
                         f"vocab_size {size}")
    tokens, types = [f"[PAD{i}]" for i in range(size)], [T.UNUSED] * size
    for token, i in ids.items():
        tokens[i] = token
        types[i] = (T.CONTROL if added[i]["special"] else T.USER_DEFINED) if i in added else T.NORMAL
    settings = _json_or_empty(os.path.join(folder, "tokenizer_config.json"))
    special_ids = {name: ids[token] for name, key in (("bos", "bos_token"), ("eos", "eos_token"),
                                                       ("padding", "pad_token"), ("unknown", "unk_token"))
                   if (token := _content(settings.get(key))) in ids}
    for name, key in (("bos", "bos_token_id"), ("eos", "eos_token_id")):
        if name not in special_ids and _first_id(cfg.get(key)) is not None:
            special_ids[name] = _first_id(cfg.get(key))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return Vocab("gpt2", tokens, types, merges, pre=_hf_pre(data, folder), special_ids=special_ids,
                 add_bos=settings.get("add_bos_token"), chat_template=_chat_template(folder, settings))


def _json_or_empty(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _content(token) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def _chat_template(folder: str, settings: dict) -> str | None:
    template = settings.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    jinja = os.path.join(folder, "chat_template.jinja")
    if template is None and os.path.isfile(jinja):
        with open(jinja) as f:
            template = f.read()
    return template


def _hf_pre(data: dict, folder: str) -> str:
    """llama.cpp's name (tokenizer.ggml.pre) for the way tokenizer.json splits text before BPE."""
    pre = data.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [step.get("type") for step in steps]
    pattern = next((step["pattern"].get("Regex", "") for step in steps if step.get("type") == "Split"), "")
    if (exact := _rebuilt_pre(data, steps)) is not None:  # one of Strata's own rules, whole
        return exact
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits"):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and r"\p{N}{1,3}" in pattern:
        return "llama-bpe"
    if kinds == ["Split", "ByteLevel"] and "(?i:'s|'t|'re|'ve|'m|'ll|'d)" in pattern:
        return "qwen35" if r"\p{M}" in pattern else "qwen2"
    raise ValueError(f"{folder}/tokenizer.json splits text with {kinds} (pattern {pattern!r}), which strata "
                     f"quantize cannot name for llama.cpp (it knows GPT-2, SmolLM, Llama-3, Qwen2/3.5 and the exact "
                     f"forms of the pre-tokenizers it reads from GGUF files); convert "
                     f"this model with llama.cpp's convert_hf_to_gguf.py, then quantize the .gguf")


def _rebuilt_pre(data: dict, steps: list[dict]) -> str | None:
    """The first `pre` name whose rule (weights/pre_tokenizers.py) this tokenizer.json is exactly: one Split a
    regex of the rule, then a ByteLevel without its own regex, NFC first and whole-token matches as the rule says
    (how Strata's rebuild of a GGUF tokenizer saves, and HF's Qwen2 / Llama-3 files are); else None."""
    *splitters, last = steps or [{}]
    if last.get("type") != "ByteLevel" or last.get("use_regex", True) \
            or any(step.get("type") != "Split" for step in splitters):
        return None
    splits = tuple(step.get("pattern", {}).get("Regex") for step in splitters)
    nfc = (data.get("normalizer") or {}).get("type") == "NFC"
    ignore_merges = bool((data.get("model") or {}).get("ignore_merges"))
    return next((name for name, rule in PRE_TOKENIZERS.items()
                 if (rule.splits, rule.nfc, rule.ignore_merges) == (splits, nfc, ignore_merges)), None)


# ---- export ---------------------------------------------------------------------------------------------

@dataclass
class ExportResult:
    paths: list[str]
    scheme: str
    tokenizer: str  # where the vocabulary came from
    seconds: float = 0.0
    tensors: Counter = field(default_factory=Counter)  # type name -> tensors
    type_bytes: Counter = field(default_factory=Counter)  # type name -> bytes of tensor data

    def summary(self) -> str:
        total = sum(self.tensors.values())
        per_type = ", ".join(f"{name} {count} ({self.type_bytes[name] / 2**20:,.1f} MiB)"
                             for name, count in self.tensors.most_common())
        return (f"wrote {', '.join(self.paths)}: {self.scheme}, {total} tensors, "
                f"{sum(self.type_bytes.values()) / 2**30:,.2f} GiB of tensor data in {self.seconds:.1f}s\n"
                f"  types: {per_type}\n  tokenizer: {self.tokenizer}")


def export_gguf(spec: str, path: str, scheme: str = "q4_k_m", device: str = "cpu", seed: int = 0,
                dtype: str | None = None, quiet: bool = True) -> ExportResult:
    """Write the model `spec` (HF folder, .gguf file, random:<shape>, built-in name) to `path` as a GGUF file
    of `scheme`, quantizing on `device`. dtype: the random model's (default: float32 on the CPU, bfloat16
    elsewhere); streamed sources are read in float32. quiet=False shows a progress bar (on a terminal)."""
    chosen = get_scheme(scheme)
    started = time.perf_counter()
    source = open_source(spec)
    if getattr(source, "routing_skew", 0):
        raise ValueError(f"{spec}: routing_skew is a bias on the router's logits, which a GGUF file cannot hold; "
                         f"quantize the shape without it")
    hf_config = _hf_config(source)
    if hasattr(source, "initialize"):  # random weights: only a built model has them
        dtype = dtype or ("float32" if device == "cpu" else "bfloat16")
        tensors = hf_state(build_model(source, device, dtype, seed=seed, quiet=True))
    else:
        tensors = _SourceTensors(source, torch.float32, device)
    vocab, vocab_from = tokenizer_of(source, hf_config)
    shapes = llama_cpp_shapes(hf_config, tensors)
    types = choose_types(chosen, shapes, hf_config["num_hidden_layers"])
    result = ExportResult([], chosen.name, vocab_from)

    with progress.bar(f"quantizing to {chosen.name}", len(shapes), quiet) as advance:
        def written(name: str, qtype: Q, num_bytes: int) -> None:
            result.tensors[qtype.name] += 1
            result.type_bytes[qtype.name] += num_bytes
            advance()

        with torch.no_grad():
            result.paths = write_gguf(path, hf_config, tensors, lambda name, shape: types[name], vocab,
                                      file_type=chosen.file_type, on_tensor=written, shapes=shapes)
    result.seconds = time.perf_counter() - started
    return result


def _hf_config(source) -> dict:
    cfg = dict(source.hf_config)
    if "full_attention_interval" not in cfg and "full_attention" in (cfg.get("layer_types") or ()):
        cfg["full_attention_interval"] = cfg["layer_types"].index("full_attention") + 1
    return cfg
