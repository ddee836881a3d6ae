"""Turns one request's generated token ids into streamed text, cut at its stop strings.

Owns only text: it never decides which tokens are generated or when a request ends besides
reporting a matched stop string. Invariant: nothing emitted is ever taken back — an unfinished
UTF-8 character and any tail that may begin a stop string are held until resolved, so the
concatenated output equals tokenizer.decode(output ids), cut at the first stop string.
"""

from __future__ import annotations

from typing import Protocol

from strata.types import SamplingParams

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens decoded in front of the output: decoders that drop the leading space of the first
# token in a decode (SentencePiece) then keep it on the first output word.
NUM_PROMPT_CONTEXT_TOKENS = 5
# An unfinished UTF-8 character has at most 3 bytes; each byte-carrying token holds at least one.
MAX_UNFINISHED_CHAR_TOKENS = 3


class TokenDecoder(Protocol):
    """The one method used from an HF tokenizer."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """vLLM's prefix/read offsets: decode a few recent tokens twice and emit the difference.

    `_window_ids` starts at the prefix offset (older tokens are dropped);
    `_window_ids[:_read_offset]` is emitted text or prompt context, and decodes to `_read_text`.
    """

    def __init__(
        self, tokenizer: TokenDecoder, prompt_token_ids: list[int], skip_special_tokens: bool = True
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        context_ids = list(prompt_token_ids[-NUM_PROMPT_CONTEXT_TOKENS:])
        if self._decode(context_ids).endswith(REPLACEMENT_CHAR):
            # A prompt cut inside a character would glue its bytes to the first output tokens; the
            # output decoded alone is what tokenizer.decode(output ids) gives.
            context_ids = []
        self._window_ids = context_ids
        self._read_offset = len(context_ids)
        self._read_text = self._decode(context_ids)

    def add(self, token_ids: list[int]) -> str:
        """Return the text that `token_ids`, newly generated in order, add to the output."""
        # A token at a time keeps every decode a few tokens long, and lets the finished part of a
        # chunk through while only an unfinished last character waits.
        return "".join(self._add_one(token_id) for token_id in token_ids)

    def flush(self) -> str:
        """Return the held tail when the output ends; an unfinished character becomes U+FFFD."""
        return self._advance(len(self._window_ids), self._decode(self._window_ids))

    def _add_one(self, token_id: int) -> str:
        self._window_ids.append(token_id)
        text = self._decode(self._window_ids)
        if not text.endswith(REPLACEMENT_CHAR):
            return self._advance(len(self._window_ids), text)
        if len(self._window_ids) - self._read_offset > MAX_UNFINISHED_CHAR_TOKENS:
            return self._release_settled_text(text)
        return ""  # possibly the first bytes of a character that later tokens complete

    def _release_settled_text(self, text: str) -> str:
        """Emit all but the last few tokens once their text can no longer change.

        Without this, output that is invalid UTF-8 would be held, and re-decoded, without end.
        """
        split = len(self._window_ids) - MAX_UNFINISHED_CHAR_TOKENS
        head = self._decode(self._window_ids[:split])
        tail = self._decode(self._window_ids[split:])
        # An unfinished character lies within the last three tokens unless some of them carry no
        # bytes (empty tail). If the two halves decode to the whole, no character crosses the split.
        if not tail or head + tail != text:
            return ""
        return self._advance(split, head)

    def _advance(self, new_read_offset: int, text: str) -> str:
        """Emit `text` (the window decoded up to `new_read_offset`) past what was already read."""
        new_text = text[len(self._read_text):]
        self._window_ids = self._window_ids[self._read_offset:]
        self._read_offset = new_read_offset - self._read_offset
        self._read_text = self._decode(self._window_ids[: self._read_offset])
        return new_text

    def _decode(self, token_ids: list[int]) -> str:
        return self._tokenizer.decode(token_ids, skip_special_tokens=self._skip_special_tokens)


class StopStringMatcher:
    """Cuts a text stream at the first stop string to complete, holding back any possible start.

    Only the held tail plus the new text is searched each step: the held tail is the longest
    suffix that could begin a stop string, so no match can start earlier.
    """

    def __init__(self, stop: list[str], include_stop_str_in_output: bool = False) -> None:
        if any(not stop_str for stop_str in stop):
            raise ValueError("stop strings must be non-empty")
        self._stop = list(stop)
        self._include_stop_str = include_stop_str_in_output
        self._max_stop_len = max(map(len, self._stop), default=0)
        self._held_text = ""
        self._is_stopped = False

    @property
    def is_stopped(self) -> bool:
        return self._is_stopped

    def push(self, new_text: str) -> tuple[str, bool]:
        """Return (text safe to emit, whether a stop string has been matched)."""
        if self._is_stopped:
            return "", True
        text = self._held_text + new_text
        match = self._find_first_stop(text)
        if match is not None:
            start, end = match
            self._is_stopped = True
            self._held_text = ""
            return text[: end if self._include_stop_str else start], True
        num_held_chars = self._num_possible_stop_start_chars(text)
        self._held_text = text[len(text) - num_held_chars:]
        return text[: len(text) - num_held_chars], False

    def flush(self) -> str:
        """Return the held tail when the output ends without a stop string."""
        held_text, self._held_text = self._held_text, ""
        return held_text

    def _find_first_stop(self, text: str) -> tuple[int, int] | None:
        """(start, end) of the match that ends first, as if text arrived a character at a time,
        so the result does not depend on how the text was chunked; on a tie the longer one."""
        matches = [
            (found_at + len(stop_str), found_at)
            for stop_str in self._stop
            if (found_at := text.find(stop_str)) >= 0
        ]
        if not matches:
            return None
        end, start = min(matches)
        return start, end

    def _num_possible_stop_start_chars(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
        for num_chars in range(min(len(text), self._max_stop_len - 1), 0, -1):
            suffix = text[-num_chars:]
            if any(stop_str.startswith(suffix) for stop_str in self._stop):
                return num_chars
        return 0


class TextStream:
    """One request's output text: the detokenizer followed by the stop-string matcher."""

    def __init__(
        self, tokenizer: TokenDecoder, prompt_token_ids: list[int], params: SamplingParams
    ) -> None:
        self._detokenizer = IncrementalDetokenizer(
            tokenizer, prompt_token_ids, params.skip_special_tokens
        )
        self._stop_matcher = StopStringMatcher(params.stop, params.include_stop_str_in_output)

    def add(self, token_ids: list[int]) -> tuple[str, bool]:
        """Return (new text to emit, whether a stop string has been matched)."""
        if self._stop_matcher.is_stopped:
            return "", True
        return self._stop_matcher.push(self._detokenizer.add(token_ids))

    def flush(self) -> str:
        """Return all held text when the request ends for another reason (EOS, length, abort)."""
        text, _ = self._stop_matcher.push(self._detokenizer.flush())
        return text + self._stop_matcher.flush()
