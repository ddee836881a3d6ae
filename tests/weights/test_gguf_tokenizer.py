"""Tokenizers rebuilt from GGUF metadata (strata.tokenizer_gguf): the bundled SmolLM2 file against
transformers' own GGUF tokenizer; a qwen3next GGUF (an architecture transformers' GGUF loader refuses)
carrying SmolLM2's vocabulary with pre="qwen2" against transformers' Qwen2Tokenizer over the same
vocabulary; the pre-tokenizers against independent references; a sentencepiece vocabulary against a
transcription of llama.cpp's SPM algorithm; split files and refusals."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import random

import gguf
import numpy as np
import pytest

from gguf_writer import write_gguf
from strata.tokenizer import load_tokenizer, render_chat
from strata.tokenizer_gguf import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, build_tokenizer, read_vocab
from strata.weights import gguf_file
from tiny_models import build_hf_model

TEXTS = [
    "Hello world", "", " ", "   ", "\n", "x" * 50, "  leading spaces\tand tabs\n", "trailing   ",
    "Ünïcödé — 你好, 世界 👋 🧑‍💻 ﬁ", "e\u0301 vs \u00e9",  # decomposed and composed é
    "def f(x):\n    return x**2  # square\n\n\n\tpass\r\n", "a\r\n\r\nb    c\t\t\td",
    "12345 + 6.78 = 1,000,000; 3.14159e-10", "I'M here, you'RE there; it's theirs'll",
    "$hello (foo) [bar] {baz} !!\n\n...", "<|im_start|>user\nhi<|im_end|>\n", "a<empty_output>b",
]
USER_DEFINED_TOKEN = "<empty_output>"  # a control token of SmolLM2, written as user-defined in the qwen3next file
QWEN_TEMPLATE = ("{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                 "{%- endfor %}{%- if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}{%- endif %}")


@pytest.fixture(scope="module", autouse=True)
def shared_gguf_parsing():
    """gguf-py parses the 49k-token vocabulary in several seconds, and it is pure: parse each file once."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf_file, "open_reader", functools.lru_cache(gguf_file.open_reader))
        yield


@pytest.fixture(scope="module")
def bundled_vocab(bundled_gguf):
    return read_vocab(bundled_gguf)


@pytest.fixture(scope="module")
def ours(bundled_gguf):
    return load_tokenizer(bundled_gguf)


@pytest.fixture(scope="module")
def transformers_gguf(bundled_gguf):
    from transformers import AutoTokenizer

    from fast_gguf import fast_gguf_arrays

    folder, filename = os.path.split(bundled_gguf)
    with fast_gguf_arrays():
        return AutoTokenizer.from_pretrained(folder, gguf_file=filename, local_files_only=True)


def write_tokenizer(writer: gguf.GGUFWriter, tokens: list[str], token_types, merges=None, scores=None,
                    model: str = "gpt2", pre: str | None = None, ids: dict | None = None, add_bos: bool | None = None,
                    chat_template: str | None = None) -> None:
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([int(t) for t in token_types])
    if merges is not None:
        writer.add_token_merges([f"{a} {b}" for a, b in merges])
    if scores is not None:
        writer.add_token_scores([float(s) for s in scores])
    for name, token_id in (ids or {}).items():
        getattr(writer, f"add_{name}_token_id")(token_id)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_metadata_gguf(path: str, arch: str = "qwen3next", **tokenizer) -> str:
    writer = gguf.GGUFWriter(path, arch)
    if tokenizer:
        write_tokenizer(writer, **tokenizer)
    finish(writer)
    return path


def replace_tokenizer(src: str, dst: str, **tokenizer) -> str:
    """src with its tokenizer.* metadata replaced (gguf_writer.py writes placeholder tokens)."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if not name.startswith(("GGUF.", "tokenizer.", "general.architecture")):
            writer.add_key_value(name, field.contents(), field.types[0],
                                 field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None)
    write_tokenizer(writer, **tokenizer)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
    finish(writer)
    return dst


# ---- the bundled SmolLM2 file: identical to transformers' GGUF tokenizer ----------------------------------

@pytest.mark.parametrize("text", TEXTS)
def test_bundled_ids_match_transformers(ours, transformers_gguf, text):
    ids = ours.encode(text)
    assert ids == transformers_gguf.encode(text)
    assert ours.encode(text, add_special_tokens=False) == transformers_gguf.encode(text, add_special_tokens=False)
    assert ours.decode(ids) == transformers_gguf.decode(ids)
    assert ours.decode(ids, skip_special_tokens=True) == transformers_gguf.decode(ids, skip_special_tokens=True)


def test_bundled_vocabulary_special_tokens_and_chat_template_match_transformers(ours, transformers_gguf):
    assert ours.get_vocab() == transformers_gguf.get_vocab() and len(ours) == len(transformers_gguf) == 49152
    assert ours.special_tokens_map == transformers_gguf.special_tokens_map
    assert ours.all_special_ids == transformers_gguf.all_special_ids
    assert {i: (t.content, t.special) for i, t in ours.added_tokens_decoder.items()} == \
        {i: (t.content, t.special) for i, t in transformers_gguf.added_tokens_decoder.items()}
    for messages in ([{"role": "user", "content": "What is 2+2?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 👋"},
                      {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "12 * 34?"}]):
        text = ours.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert text == transformers_gguf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert render_chat(ours, messages) == render_chat(transformers_gguf, messages)


# ---- a qwen3next GGUF with a Qwen-style byte-level vocabulary -----------------------------------------------

@pytest.fixture(scope="module")
def qwen3next_gguf(tmp_path_factory, bundled_vocab):
    """A tiny qwen3next model written as llama.cpp would, carrying SmolLM2's vocabulary and merges with
    pre="qwen2", Qwen's special ids, a ChatML template, and one user-defined token."""
    model = build_hf_model("qwen3_next")
    folder = tmp_path_factory.mktemp("qwen3next-tokenizer")
    plain = str(folder / "placeholder-vocab.gguf")
    write_gguf(plain, {**model.config.to_dict(), "architectures": ["Qwen3NextForCausalLM"]}, model.state_dict())
    token_types = bundled_vocab.token_types.copy()
    token_types[bundled_vocab.tokens.index(USER_DEFINED_TOKEN)] = USER_DEFINED
    return replace_tokenizer(plain, str(folder / "qwen3next.gguf"), tokens=bundled_vocab.tokens,
                             token_types=token_types, merges=bundled_vocab.merges, pre="qwen2",
                             ids={"bos": 0, "eos": 2, "pad": 0}, add_bos=False, chat_template=QWEN_TEMPLATE)


@pytest.fixture(scope="module")
def qwen2_reference(bundled_vocab):
    """transformers' Qwen2Tokenizer (NFC, the Qwen2 split regex, byte-level BPE) over the same vocabulary."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab = bundled_vocab
    reference = Qwen2Tokenizer(vocab={t: i for i, t in enumerate(vocab.tokens)}, merges=vocab.merges,
                               eos_token="<|im_end|>")
    control = [t for t, kind in zip(vocab.tokens, vocab.token_types) if kind == CONTROL and t != USER_DEFINED_TOKEN]
    reference.add_tokens([AddedToken(t, special=True, normalized=False) for t in control], special_tokens=True)
    reference.add_tokens([AddedToken(USER_DEFINED_TOKEN, special=False, normalized=False)])
    return reference


@pytest.fixture(scope="module")
def qwen(qwen3next_gguf):
    return load_tokenizer(qwen3next_gguf)


def test_qwen3next_gguf_loads_with_its_special_ids(qwen3next_gguf, qwen):
    assert gguf_file.open_reader(qwen3next_gguf).fields["general.architecture"].contents() == "qwen3next"
    assert (qwen.eos_token, qwen.eos_token_id, qwen.pad_token_id) == ("<|im_end|>", 2, 0)
    assert qwen.encode("hi") == qwen.encode("hi", add_special_tokens=False)  # add_bos_token = false


@pytest.mark.parametrize("text", TEXTS)
def test_qwen2_pre_tokenizer_encodes_like_qwen2_tokenizer(qwen, qwen2_reference, text):
    ids = qwen.encode(text, add_special_tokens=False)
    assert ids == qwen2_reference.encode(text, add_special_tokens=False)
    assert qwen.decode(ids, skip_special_tokens=True) == qwen2_reference.decode(ids, skip_special_tokens=True)


def test_qwen2_pre_tokenizer_is_the_one_used(qwen3next_gguf, qwen):
    """The same vocabulary split the SmolLM way tokenizes the text set differently (so the test above
    tells the pre-tokenizers apart), and NFC applies only to Qwen's."""
    smol = build_tokenizer(dataclasses.replace(read_vocab(qwen3next_gguf), pre="smollm"))
    differ = [text for text in TEXTS if qwen.encode(text) != smol.encode(text)]
    assert "$hello (foo) [bar] {baz} !!\n\n..." in differ and "e\u0301 vs \u00e9" in differ


def test_user_defined_token_is_whole_and_not_special(qwen):
    token_id = qwen.convert_tokens_to_ids(USER_DEFINED_TOKEN)
    ids = qwen.encode(f"a{USER_DEFINED_TOKEN}b<|im_end|>")
    assert token_id in ids and qwen.eos_token_id in ids
    assert qwen.decode(ids, skip_special_tokens=True) == f"a{USER_DEFINED_TOKEN}b"


def test_chat_template_from_the_file(qwen, qwen2_reference):
    messages = [{"role": "user", "content": "Why is the sky blue? 🌅"}]
    expected = "<|im_start|>user\nWhy is the sky blue? 🌅<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = render_chat(qwen, messages)
    assert ids == qwen2_reference.encode(expected, add_special_tokens=False)
    assert ids[0] == qwen.convert_tokens_to_ids("<|im_start|>") and qwen.decode(ids) == expected


# ---- pre-tokenizers against independent references ----------------------------------------------------------

def _reference_pre_tokenizers():
    from tokenizers import Regex, pre_tokenizers
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX as QWEN35

    llama3 = inspect.signature(TikTokenConverter.__init__).parameters["pattern"].default  # Llama-3's tokenizer.json

    def split(pattern):
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])

    return {"gpt-2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            "smollm": pre_tokenizers.Sequence([  # SmolLM2's tokenizer.json
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
            "qwen2": split(QWEN2), "qwen35": split(QWEN35), "llama-bpe": split(llama3)}


@pytest.mark.parametrize("pre", ["gpt-2", "smollm", "qwen2", "qwen35", "llama-bpe"])
def test_pre_tokenizer_splits_like_reference(bundled_vocab, pre):
    ours = build_tokenizer(dataclasses.replace(bundled_vocab, pre=pre)).backend_tokenizer.pre_tokenizer
    reference = _reference_pre_tokenizers()[pre]
    extra = ["don'T STOP 1234567", "x\u0301\u0302y", "hello\r\n\r\n  world  !!!\n"]
    for text in TEXTS + extra:
        assert [p for p, _ in ours.pre_tokenize_str(text)] == [p for p, _ in reference.pre_tokenize_str(text)], text


@pytest.mark.parametrize("pre", ["default", "smollm", "qwen2", "stablelm2", "qwen35", "llama-bpe", "dbrx", "gpt-4o",
                                 "tekken"])
def test_a_saved_rebuilt_tokenizer_is_named_back_for_llama_cpp(bundled_vocab, pre, tmp_path):
    """A GGUF tokenizer rebuilt here and saved as tokenizer.json (an HF folder made from a GGUF) is named again for
    `strata quantize`: the first `pre` name of the same rule (splits, NFC, whole-token matches), so the same text
    splits."""
    import json

    from strata.tokenizer_gguf import PRE_TOKENIZERS
    from strata.weights.gguf_export import _hf_pre

    build_tokenizer(dataclasses.replace(bundled_vocab, pre=pre)).save_pretrained(str(tmp_path))
    with open(tmp_path / "tokenizer.json") as f:
        named = _hf_pre(json.load(f), str(tmp_path))
    assert PRE_TOKENIZERS[named] == PRE_TOKENIZERS[pre]
    assert named == next(name for name, rule in PRE_TOKENIZERS.items() if rule == PRE_TOKENIZERS[pre])


def test_llama3_files_add_bos_unless_they_say_otherwise(bundled_vocab):
    llama3, bos = dataclasses.replace(bundled_vocab, pre="llama-bpe", add_bos=None), bundled_vocab.special_ids["bos"]
    assert build_tokenizer(llama3).encode("hi")[0] == bos
    assert build_tokenizer(dataclasses.replace(llama3, add_bos=False)).encode("hi")[0] != bos


# ---- sentencepiece ("llama") vocabularies against llama.cpp's SPM algorithm ---------------------------------

def llama_cpp_spm(tokens: list[str], scores: list[float], specials: list[str], text: str) -> list[int]:
    """llama.cpp's llm_tokenizer_spm, transcribed: split out special tokens; prefix each stretch of text
    that follows the start or a special token with a space; escape spaces as U+2581; repeatedly merge the
    adjacent pair whose union is the best-scored token (ties: leftmost); bytes for what is not a token."""
    ids = {t: i for i, t in enumerate(tokens)}
    out, prev_special, rest = [], True, text
    while rest:
        hits = [(rest.find(s), s) for s in specials if s in rest]
        cut, special = min(hits, key=lambda h: (h[0], -len(h[1]))) if hits else (len(rest), None)
        if cut:
            symbols = list(((" " if prev_special else "") + rest[:cut]).replace(" ", "\u2581"))
            while True:
                pairs = [(-scores[ids[a + b]], i) for i, (a, b) in enumerate(zip(symbols, symbols[1:])) if a + b in ids]
                if not pairs:
                    break
                _, i = min(pairs)
                symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
            for s in symbols:
                out += [ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode()]
            prev_special = False
        if special is not None:
            out.append(ids[special])
            prev_special, cut = True, cut + len(special)
        rest = rest[cut:]
    return out


def random_spm_vocab(seed: int) -> tuple[list[str], list[int], list[float]]:
    rng = random.Random(seed)
    alphabet = "abcde\u2581é"
    pieces = list(alphabet)
    while len(pieces) < 120:
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 6)))
        if piece not in pieces:
            pieces.append(piece)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    token_types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-rng.uniform(0, 20) for _ in pieces]
    return tokens, token_types, scores


@pytest.mark.parametrize("seed", range(4))
def test_sentencepiece_vocabulary_tokenizes_like_llama_cpp(seed, tmp_path):
    tokens, token_types, scores = random_spm_vocab(seed)
    path = write_metadata_gguf(str(tmp_path / "spm.gguf"), arch="llama", model="llama", tokens=tokens,
                               token_types=token_types, scores=scores, ids={"bos": 1, "eos": 2, "unk": 0})
    tokenizer = load_tokenizer(path)
    rng = random.Random(seed)
    texts = [" hello", "<s>ab</s> cd", "ab\ncd  é  ü", ""] + \
        ["".join(rng.choice("abcde é ü\n") for _ in range(rng.randint(1, 40))) for _ in range(200)]
    for text in texts:
        expected = llama_cpp_spm(tokens, scores, ["<s>", "</s>"], text)
        assert tokenizer.encode(text) == [1] + expected, repr(text)  # sentencepiece files add BOS by default
        if "<" not in text:
            assert tokenizer.decode(expected) == text, repr(text)


# ---- split files, no vocabulary, refusals --------------------------------------------------------------------

def test_split_gguf_reads_the_first_file(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "qwen3next", split_max_tensors=1)
    write_tokenizer(writer, tokens=["a", "b", "ab", "<|im_end|>"], token_types=[NORMAL] * 3 + [CONTROL],
                    merges=[("a", "b")], pre="qwen2", ids={"eos": 3})
    for name in ("x", "y"):
        writer.add_tensor(name, np.zeros(4, np.float32))
    finish(writer)
    second = str(tmp_path / "m-00002-of-00002.gguf")
    assert "tokenizer.ggml.tokens" not in gguf.GGUFReader(second).fields
    assert load_tokenizer(second).encode("abab<|im_end|>") == [2, 2, 3]
    os.remove(tmp_path / "m-00001-of-00002.gguf")
    with pytest.raises(ValueError, match=r"m-00002-of-00002.gguf is one of 2 parts of a split GGUF, but "
                                         r".*m-00001-of-00002.gguf is missing"):
        load_tokenizer(second)


@pytest.mark.parametrize("model", [None, "none", "no_vocab"])
def test_gguf_without_vocabulary_has_no_tokenizer(model, tmp_path):
    tokenizer = {} if model is None else dict(model=model, tokens=["a"], token_types=[NORMAL])
    assert load_tokenizer(write_metadata_gguf(str(tmp_path / "m.gguf"), **tokenizer)) is None


def test_unknown_tokenizer_model_names_file_and_model(tmp_path):
    path = write_metadata_gguf(str(tmp_path / "m.gguf"), model="wordpiece-x", tokens=["a"], token_types=[NORMAL])
    with pytest.raises(ValueError, match=rf"{path}: tokenizer.ggml.model 'wordpiece-x' is not supported "
                                         r"\(supported: gpt2, llama\)"):
        load_tokenizer(path)


def test_unknown_pre_tokenizer_names_file_and_pre(tmp_path):
    path = write_metadata_gguf(str(tmp_path / "m.gguf"), tokens=["a"], token_types=[NORMAL], merges=[], pre="nova")
    with pytest.raises(ValueError, match=rf"{path}: tokenizer.ggml.pre 'nova' is not supported \(supported: default, "):
        load_tokenizer(path)


def test_duplicate_token_is_refused(tmp_path):
    path = write_metadata_gguf(str(tmp_path / "m.gguf"), tokens=["a", "b", "a"], token_types=[NORMAL] * 3, merges=[])
    with pytest.raises(ValueError, match=r"token 'a' appears twice in tokenizer.ggml.tokens \(ids 0 and 2\)"):
        load_tokenizer(path)


def test_corrupt_gguf_names_the_file(tmp_path):
    path = write_metadata_gguf(str(tmp_path / "m.gguf"), tokens=["a", "b"], token_types=[NORMAL] * 2, merges=[])
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)  # the token list is cut
    with pytest.raises(ValueError, match=f"{path} is truncated or corrupt"):
        load_tokenizer(path)


def test_missing_merges_are_derived_from_token_order(tmp_path):
    path = write_metadata_gguf(str(tmp_path / "m.gguf"), tokens=["a", "b", "c", "bc", "ab"],
                               token_types=[NORMAL] * 5, pre="gpt-2")
    assert load_tokenizer(path).encode("abc") == [0, 3]  # "b c" (id 3) ranks before "a b" (id 4)
