"""A GGUF file's tokenizer, rebuilt from its `tokenizer.ggml.*` metadata for any architecture.

Owns reading the vocabulary (the file opened as the weights open it; its token list turned into Python
strings once) and building an HF fast tokenizer over a `tokenizers` BPE: byte-level for `gpt2`
vocabularies, split as llama.cpp splits for the file's `tokenizer.ggml.pre` (weights/pre_tokenizers.py); byte
fallback with merges ranked by token score for sentencepiece (`llama`) ones. Other tokenizer models are refused by name.
Invariant: ids are the file's: the vocabulary is the token list verbatim, every added token one of its entries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from strata import progress
from strata.weights.pre_tokenizers import PRE_TOKENIZERS

logger = logging.getLogger(__name__)

# gguf.TokenType, spelled here so that reading the table needs no import
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
NO_VOCAB_MODELS = ("none", "no_vocab")  # llama.cpp's "this model has no tokenizer"
SUPPORTED_MODELS = ("gpt2", "llama")
_SPECIAL_ID_KEYS = ("bos", "eos", "eot", "eom", "unknown", "padding")


# ---- reading --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GGUFVocab:
    path: str
    model: str  # tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (sentencepiece)
    pre: str  # tokenizer.ggml.pre ("default" when absent, as in llama.cpp)
    tokens: list[str]  # [V]
    token_types: np.ndarray  # [V] int32, gguf.TokenType (NORMAL when the file has none)
    scores: np.ndarray | None  # [V] float32
    merges: list[tuple[str, str]] | None
    special_ids: dict[str, int]  # "bos", "eos", "eot", "eom", "unknown", "padding": those the file names
    add_bos: bool | None  # None: the file does not say
    add_eos: bool
    add_space_prefix: bool  # sentencepiece only (llama.cpp's BPE ignores it)
    chat_template: str | None


def read_vocab(path: str) -> GGUFVocab | None:
    """The file's tokenizer metadata; None when it has no tokenizer. A split GGUF keeps it in its first part."""
    from strata.weights.gguf_file import open_parts

    with progress.status(f"reading the vocabulary of {path}"):  # gguf-py: seconds for a large vocabulary
        first = open_parts(path)[0]  # checks the file (and every part) first: errors name the file and what to do
    path, fields = first.path, first.fields
    model = _scalar(fields, "tokenizer.ggml.model")
    if model is None or model in NO_VOCAB_MODELS or "tokenizer.ggml.tokens" not in fields:
        return None
    if model not in SUPPORTED_MODELS:
        raise ValueError(f"{path}: tokenizer.ggml.model {model!r} is not supported (supported: "
                         f"{', '.join(SUPPORTED_MODELS)}); Strata cannot rebuild this file's tokenizer from its "
                         f"metadata")
    # llama.cpp names an empty token "[EMPTY_<id>]"
    tokens = [token or f"[EMPTY_{i}]" for i, token in enumerate(_strings(fields["tokenizer.ggml.tokens"]))]
    merges = _strings(fields["tokenizer.ggml.merges"]) if "tokenizer.ggml.merges" in fields else None
    special_ids = {name: _scalar(fields, f"tokenizer.ggml.{name}_token_id") for name in _SPECIAL_ID_KEYS}
    return GGUFVocab(
        path=path, model=model, pre=_scalar(fields, "tokenizer.ggml.pre") or "default", tokens=tokens,
        token_types=_numbers(fields, "tokenizer.ggml.token_type", np.full(len(tokens), NORMAL, np.int32)),
        scores=_numbers(fields, "tokenizer.ggml.scores", None),
        merges=None if merges is None else [_merge_pair(m) for m in merges],
        special_ids={k: int(v) for k, v in special_ids.items() if v is not None and 0 <= v < len(tokens)},
        add_bos=_scalar(fields, "tokenizer.ggml.add_bos_token"),
        add_eos=bool(_scalar(fields, "tokenizer.ggml.add_eos_token", False)),
        add_space_prefix=bool(_scalar(fields, "tokenizer.ggml.add_space_prefix", True)),
        chat_template=_scalar(fields, "tokenizer.chat_template"))


def _scalar(fields, key: str, default=None):
    field = fields.get(key)
    return default if field is None else field.contents()


def _strings(field) -> list[str]:
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _numbers(fields, key: str, default: np.ndarray | None) -> np.ndarray | None:
    field = fields.get(key)
    return default if field is None else np.concatenate([field.parts[i] for i in field.data])


def _merge_pair(merge: str) -> tuple[str, str]:
    cut = merge.find(" ", 1)  # from 1, as llama.cpp: a merge may start with a space token
    return merge[:cut], merge[cut + 1:]


# ---- building -------------------------------------------------------------------------------------------

def load_gguf_tokenizer(path: str):
    """-> transformers PreTrainedTokenizerFast, or None when the file has no tokenizer."""
    vocab = read_vocab(path)
    return None if vocab is None else build_tokenizer(vocab)


def build_tokenizer(vocab: GGUFVocab):
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    ids = _token_ids(vocab)
    backend, add_bos = _byte_level(vocab, ids) if vocab.model == "gpt2" else _sentencepiece(vocab, ids)
    _add_file_tokens(backend, vocab)
    names = {key: vocab.tokens[i] for key, i in vocab.special_ids.items()}
    add_bos = (vocab.add_bos if vocab.add_bos is not None else add_bos) and "bos" in names
    add_eos = vocab.add_eos and "eos" in names
    bos, eos = [names["bos"]] if add_bos else [], [names["eos"]] if add_eos else []
    single = [f"{t}:0" for t in bos] + ["$A:0"] + [f"{t}:0" for t in eos]
    pair = single + [f"{t}:1" for t in bos] + ["$B:1"] + [f"{t}:1" for t in eos]
    backend.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, backend.token_to_id(t)) for t in bos + eos])
    # transformers >= 5 rebuilds the same template from add_bos_token / add_eos_token; 4.x keeps ours
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=names.get("bos"), eos_token=names.get("eos"),
        unk_token=names.get("unknown"), pad_token=names.get("padding"), add_bos_token=add_bos,
        add_eos_token=add_eos, chat_template=vocab.chat_template, clean_up_tokenization_spaces=False)


def _token_ids(vocab: GGUFVocab) -> dict[str, int]:
    ids = {}
    for i, token in enumerate(vocab.tokens):
        if token in ids:  # llama.cpp refuses these too: one of the two ids could never be produced
            raise ValueError(f"{vocab.path}: token {token!r} appears twice in tokenizer.ggml.tokens (ids {ids[token]} "
                             f"and {i}); convert the model again with a current llama.cpp")
        ids[token] = i
    return ids


def _byte_level(vocab: GGUFVocab, ids: dict[str, int]):
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    pre = PRE_TOKENIZERS.get(vocab.pre)
    if pre is None:
        raise ValueError(f"{vocab.path}: tokenizer.ggml.pre {vocab.pre!r} is not supported (supported: "
                         f"{', '.join(PRE_TOKENIZERS)}); splitting text another way would give the model wrong ids")
    merges = vocab.merges
    if merges is None:
        logger.warning("%s has no tokenizer.ggml.merges; deriving them from the token order", vocab.path)
        merges = _merges_by_rank(vocab, ids, -np.arange(len(vocab.tokens), dtype=np.float32))
    backend = Tokenizer(BPE(ids, merges, ignore_merges=pre.ignore_merges))
    if pre.nfc:
        backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated") for split in pre.splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    return backend, pre.add_bos


def _sentencepiece(vocab: GGUFVocab, ids: dict[str, int]):
    """llama.cpp's SPM: escape spaces as U+2581 (and prefix one), then merge the adjacent pair whose
    union is the highest-scored token, bytes for what is left: BPE with merges ranked by score."""
    from tokenizers import Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    scores = vocab.scores if vocab.scores is not None else np.zeros(len(vocab.tokens), np.float32)
    unk = vocab.tokens[vocab.special_ids["unknown"]] if "unknown" in vocab.special_ids else None
    backend = Tokenizer(BPE(ids, _merges_by_rank(vocab, ids, scores), unk_token=unk, fuse_unk=True,
                            byte_fallback=True))
    escape = normalizers.Replace(" ", "\u2581")
    backend.normalizer = (normalizers.Sequence([normalizers.Prepend("\u2581"), escape]) if vocab.add_space_prefix
                          else escape)
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] * vocab.add_space_prefix)
    return backend, True


def _merges_by_rank(vocab: GGUFVocab, ids: dict[str, int], scores: np.ndarray) -> list[tuple[str, str]]:
    """Every split of a mergeable token into two tokens, best-scored token first (ties: lower id)."""
    mergeable = np.isin(vocab.token_types, (NORMAL, USER_DEFINED))
    found = []
    for token_id in np.flatnonzero(mergeable):
        token = vocab.tokens[token_id]
        for cut in range(1, len(token)):
            left, right = ids.get(token[:cut]), ids.get(token[cut:])
            if left is not None and right is not None and mergeable[left] and mergeable[right]:
                found.append((-float(scores[token_id]), int(token_id), cut))
    found.sort()
    return [(vocab.tokens[i][:cut], vocab.tokens[i][cut:]) for _, i, cut in found]


def _add_file_tokens(backend, vocab: GGUFVocab) -> None:
    """Control tokens (and the ids the file names: BOS, EOS, EOT, ...) become special added tokens,
    user-defined ones (`<think>`) plain added tokens: both are then matched whole in text, as in llama.cpp.
    Each is an entry of the vocabulary already, so its id stays the file's."""
    from tokenizers import AddedToken

    special = set(np.flatnonzero(np.isin(vocab.token_types, (CONTROL, UNKNOWN)))) | set(vocab.special_ids.values())
    user_defined = np.flatnonzero(vocab.token_types == USER_DEFINED)
    backend.add_special_tokens([AddedToken(vocab.tokens[i], special=True, normalized=False) for i in sorted(special)])
    backend.add_tokens([AddedToken(vocab.tokens[i], special=False, normalized=False) for i in user_defined
                        if i not in special])
