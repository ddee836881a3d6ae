"""Structured output: a request's constraint (types.StructuredOutputs, or the tool call that tool_choice
requires) -> an llguidance grammar, checked against the model's tokenizer. Torch-free: the server checks a
constraint here (a bad one is a 400 before anything is submitted) and the engine builds each request's
matcher here; strata/sample/constraints.py applies the matchers' token masks to the logits.

Why llguidance (over xgrammar and outlines-core): one abi3 wheel serves every CPython >= 3.9 and it needs
no torch, so the server process can check grammars; it compiles nothing per schema ahead of decoding
(an Earley parser walks a token trie: tens of microseconds per mask, masks for a batch filled in parallel
threads with the GIL released), it rolls back consumed tokens (speculative windows), and it reads JSON
Schema, regular expressions and Lark grammars with embedded JSON Schemas (%json), which the tool-call
grammar needs. vLLM, SGLang and llama.cpp use it.
"""

from __future__ import annotations

import copy
import functools
import json
import re

import llguidance
from llguidance.gbnf_to_lark import GbnfToLarkError, any_to_lark

from strata.types import StructuredOutputs

# Compact JSON (no free whitespace): a weak or random model cannot pad its output with endless spaces,
# and what it writes is what json.dumps(..., separators=(",", ":")) would.
JSON_OPTIONS = {"whitespace_flexible": False}


def grammar_of(constraint: StructuredOutputs) -> str:
    """The llguidance grammar (serialized) of a constraint. Raises ValueError for text that is not JSON or
    a grammar that cannot be converted; whether the grammar holds together is check()'s question."""
    if constraint.json is not None or constraint.json_object:
        schema = {"type": "object"} if constraint.json_object else constraint.json
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise ValueError(f"the JSON schema is not valid JSON: {e}") from e
        if not isinstance(schema, (dict, bool)):
            raise ValueError("the JSON schema must be an object")
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    if constraint.regex is not None:
        return llguidance.LLMatcher.grammar_from_regex(constraint.regex)
    if constraint.choice is not None:
        return llguidance.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in constraint.choice))
    try:
        return llguidance.LLMatcher.grammar_from_lark(any_to_lark(constraint.grammar or ""))
    except GbnfToLarkError as e:
        raise ValueError(f"the grammar is neither Lark nor GBNF: {e}") from e


def _think_rule(close_token: bool) -> str:
    """Reasoning (text without "<"), then "</think>": as text, or also as the vocabulary's own `</think>` token
    (`close_token`), which llguidance counts among the special tokens and so never matches the text."""
    close = '("</think>" | </think>)' if close_token else '"</think>"'
    return f'think: /[^<]*/ {close} /[ \\n]*/'


def after_reasoning(constraint: StructuredOutputs, close_token: bool = False) -> StructuredOutputs:
    """The constraint behind a reasoning block, for a template that opened <think> in the prompt: reasoning
    (text without "<") and "</think>" first, then the constrained answer. A user's own grammar is left as it
    is: it says itself what comes first. `close_token`: the vocabulary has a `</think>` token (a model that
    thinks, strata/reasoning.py)."""
    if constraint.json is not None or constraint.json_object:
        schema = {"type": "object"} if constraint.json_object else constraint.json
        schema = json.loads(schema) if isinstance(schema, str) else schema
        body = "%json " + json.dumps({**schema, "x-guidance": JSON_OPTIONS} if isinstance(schema, dict) else schema)
    elif constraint.regex is not None:
        body = "/" + re.sub(r"(?<!\\)/", r"\/", constraint.regex) + "/"
    elif constraint.choice is not None:
        body = "(" + " | ".join(json.dumps(c) for c in constraint.choice) + ")"
    else:
        return constraint
    return StructuredOutputs(grammar=f"start: think {body}\n{_think_rule(close_token)}")


def tool_call_grammar(tools: list[tuple[str, dict]], parallel: bool = True,
                      starts_in_reasoning: bool = False, close_token: bool = False) -> StructuredOutputs:
    """The output must be tool calls of these (name, parameters schema) in the Hermes form the output
    parser reads (`<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`): one, or with `parallel`
    one or more. A template that opened a <think> block keeps its reasoning (text without "<") first."""
    calls = [{"type": "object", "properties": {"name": {"const": name}, "arguments": parameters or {"type": "object"}},
              "required": ["name", "arguments"], "additionalProperties": False} for name, parameters in tools]
    body = calls[0] if len(calls) == 1 else {"anyOf": calls}
    body = {**body, "x-guidance": JSON_OPTIONS}
    lines = ["start: " + ("think " if starts_in_reasoning else "") + "call" + (' ("\\n" call)*' if parallel else ""),
             'call: "<tool_call>\\n" %json ' + json.dumps(body) + ' "\\n</tool_call>"']
    if starts_in_reasoning:
        lines.append(_think_rule(close_token))
    return StructuredOutputs(grammar="\n".join(lines))


@functools.lru_cache(maxsize=4)
def llg_tokenizer(hf_tokenizer, vocab_size: int, eos_token_ids: tuple[int, ...]) -> llguidance.LLTokenizer:
    """llguidance's view of an HF fast tokenizer (about a second to build, so cached), over the model's
    whole vocabulary (ids past the tokenizer's are never allowed); a finished grammar allows only EOS."""
    backend = copy.copy(hf_tokenizer.backend_tokenizer)
    backend.no_padding()
    backend.no_truncation()
    eos = list(eos_token_ids) or [hf_tokenizer.eos_token_id]
    return llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab_size, eos_token=eos)


def check(constraint: StructuredOutputs, tokenizer: llguidance.LLTokenizer) -> None:
    """Raise ValueError naming the problem when the constraint's grammar is invalid or unsatisfiable."""
    constraint.validate()
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar_of(constraint), tokenizer)
    if is_error:
        raise ValueError(f"invalid structured output constraint: {messages[0].strip()}")


def new_matcher(constraint: StructuredOutputs, tokenizer: llguidance.LLTokenizer) -> llguidance.LLMatcher:
    """A fresh matcher at the start of the output; ValueError when the grammar does not compile."""
    matcher = llguidance.LLMatcher(tokenizer, grammar_of(constraint), log_level=0)
    if matcher.is_error():
        raise ValueError(f"invalid structured output constraint: {matcher.get_error().strip()}")
    return matcher
