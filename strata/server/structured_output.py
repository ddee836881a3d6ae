"""What a request asks its output to be, as one StructuredOutputs that the engine enforces while decoding:
OpenAI `response_format` (json_object, json_schema), vLLM's `structured_outputs` (and its older `guided_*`
fields), `tool_choice` "required" or a named function, Anthropic `tool_choice` any / tool. The constraint
is checked against the model's tokenizer here, so a bad schema or grammar is a 400 naming the field before
anything is submitted; `logit_bias` is checked against the vocabulary.
"""

from __future__ import annotations

import asyncio

from strata import structured
from strata.server import limits
from strata.server.errors import APIError
from strata.server.template import ToolSpec
from strata.types import StructuredOutputs

_GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}


def logit_bias(bias: dict[str, float] | None, vocab_size: int) -> dict[int, float] | None:
    """OpenAI's {"token id": bias} -> {id: bias}; 400 naming logit_bias for a key that is not a token id
    of this model or a bias outside [-100, 100]."""
    if not bias:
        return None
    out = {}
    for key, value in bias.items():
        try:
            token_id = int(key)
        except ValueError:
            raise APIError(400, f"logit_bias keys must be token ids, got {key!r}", "logit_bias") from None
        if not 0 <= token_id < vocab_size:
            raise APIError(400, f"logit_bias key {key} is not a token id of this model: ids are in [0, {vocab_size})",
                           "logit_bias")
        if not -100.0 <= value <= 100.0:
            raise APIError(400, f"logit_bias values must be in [-100, 100], got {value} for token {key}", "logit_bias")
        out[token_id] = float(value)
    return out


def openai_tool_choice(choice, tools: list[ToolSpec] | None) -> str | None:
    """OpenAI `tool_choice` -> "required", the one function's name, or None (auto / none: nothing enforced)."""
    if choice in (None, "auto", "none"):
        return None
    if not tools:
        raise APIError(400, f"tool_choice {choice!r} needs tools to choose from", "tool_choice")
    if choice == "required":
        return "required"
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise APIError(400, 'tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
                            '{"name": …}}', "tool_choice")
    return _known(name, tools, "tool_choice.function.name")


def anthropic_tool_choice(choice, tools: list[ToolSpec] | None) -> str | None:
    """Anthropic `tool_choice` {type: any} -> "required", {type: tool, name} -> the name, else None."""
    if choice is None or choice.type in ("auto", "none"):
        return None
    if not tools:
        raise APIError(400, f"tool_choice {choice.type!r} needs tools to choose from", "tool_choice")
    if choice.type == "any":
        return "required"
    if not choice.name:
        raise APIError(400, "tool_choice of type tool needs the tool's name", "tool_choice.name")
    return _known(choice.name, tools, "tool_choice.name")


def _known(name: str, tools: list[ToolSpec], param: str) -> str:
    if name not in {t.name for t in tools}:
        raise APIError(400, f"{param} is {name!r}, which is not one of the request's tools "
                            f"({', '.join(t.name for t in tools)})", param)
    return name


def requested(body, tools: list[ToolSpec] | None = None, tool_choice=None, parallel: bool = True,
              starts_in_reasoning: bool = False, close_token: bool = False
              ) -> tuple[StructuredOutputs | None, str | None]:
    """-> (the constraint, the field that asked for it), or (None, None). More than one is a 400.
    `tool_choice`: "required", or the name of the one function that must be called. `close_token`: the model's
    vocabulary has a `</think>` token, which a reasoning block may end with (structured.after_reasoning)."""
    found: list[tuple[StructuredOutputs, str]] = []
    response_format = getattr(body, "response_format", None)
    if response_format is not None and response_format.type == "json_object":
        found.append((StructuredOutputs(json_object=True), "response_format"))
    elif response_format is not None and response_format.type == "json_schema":
        found.append((StructuredOutputs(json=response_format.json_schema.schema_), "response_format.json_schema.schema"))
    if getattr(body, "structured_outputs", None) is not None:
        found.append((StructuredOutputs(**body.structured_outputs.model_dump(exclude_none=True, by_alias=True)), "structured_outputs"))
    for field, name in _GUIDED.items():
        if getattr(body, field, None) is not None:
            found.append((StructuredOutputs(**{name: getattr(body, field)}), field))
    if tool_choice is not None:
        chosen = [t for t in tools or () if tool_choice == "required" or t.name == tool_choice]
        found.append((structured.tool_call_grammar([(t.name, t.parameters) for t in chosen], parallel,
                                                   starts_in_reasoning, close_token), "tool_choice"))
    if len(found) > 1:
        raise APIError(400, f"{' and '.join(f for _, f in found)} each constrain the output; give only one of them",
                       found[1][1])
    if not found:
        return None, None
    constraint, field = found[0]
    if starts_in_reasoning and field != "tool_choice":  # the parser reads the output as reasoning until </think>
        constraint = structured.after_reasoning(constraint, close_token)
    return constraint, field


async def check(state, constraint: StructuredOutputs | None, param: str | None) -> None:
    """400 naming `param` when the constraint cannot be enforced (an invalid or unsatisfiable schema or
    grammar, or a model without a tokenizer). In a thread: llguidance's tokenizer takes about a second to
    build the first time, and a large grammar some milliseconds to check."""
    if constraint is None:
        return
    if isinstance(constraint.json, dict) and param in ("structured_outputs", "guided_json"):  # response_format's
        limits.check_schema(state.config, constraint.json, param)                           # was checked already
    tokenizer = state.template.tokenizer
    if tokenizer is None:
        raise APIError(400, "structured output needs the model's tokenizer, and this model has none", param)
    try:
        await asyncio.to_thread(_check, constraint, tokenizer, state.vocab_size)
    except ValueError as e:
        raise APIError(400, f"{param}: {e}", param) from None


def _check(constraint: StructuredOutputs, tokenizer, vocab_size: int) -> None:
    structured.check(constraint, structured.llg_tokenizer(tokenizer, vocab_size, ()))
