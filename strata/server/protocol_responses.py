"""Pydantic models of the OpenAI Responses request body (POST /v1/responses).

Input items are what a client sends and what it echoes back from earlier responses (messages,
function_call, function_call_output, reasoning); fields that only echo state (id, status, annotations)
are ignored there. At the top level and in the option objects every field is either implemented or
refused: the route answers 400 naming each unknown or unsupported field, never drops one silently.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from strata.server.protocol_openai import FunctionDefinition


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TextPart(_Item):
    type: Literal["input_text", "output_text", "text"]
    text: str


class RefusalPart(_Item):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[Union[TextPart, RefusalPart], Field(discriminator="type")]


class MessageItem(_Item):
    type: Literal["message"]
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _is_json_object(cls, value: str) -> str:
        try:
            parsed = json.loads(value or "{}")
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError("arguments must be the JSON text of an object")
        return value


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]


class ReasoningItem(_Item):
    """Echoed back from an earlier response; chat templates drop past reasoning, and so do we."""
    type: Literal["reasoning"]


InputItem = Annotated[Union[MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem],
                      Field(discriminator="type")]


class FunctionTool(FunctionDefinition):
    """Responses' flat tool shape: {type, name, description, parameters, strict}."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    type: Literal["function"]


class NamedToolChoice(_Options):
    type: Literal["function"]
    name: str


class ReasoningOptions(_Options):
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None  # reasoning comes back whole, never summarised


class TextFormat(_Options):
    """{"type": "text"}, {"type": "json_object"} or Responses' flat {"type": "json_schema", "name", "schema"}."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, min_length=1, max_length=64)
    description: str | None = None
    schema_: dict | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextOptions(_Options):
    format: TextFormat | None = None


class StreamOptions(_Options):
    include_obfuscation: bool | None = None  # obfuscation pads deltas against side channels; none is added


class ResponsesRequest(BaseModel):
    """Unknown top-level fields are kept in `model_extra` so the route can refuse them by name."""
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[Annotated[Union[FunctionTool], Field(discriminator="type")]] | None = None  # 400 names other types
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    reasoning: ReasoningOptions | None = None
    text: TextOptions | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    store: bool = True
    include: list[Literal["reasoning.encrypted_content"]] | None = None
    truncation: Literal["auto", "disabled"] | None = None  # never truncates: too long is a 400 either way
    # bookkeeping a client may send; echoed back where the Response object has a place for it
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    strata_pin_prefix: bool | None = None   # Strata's prefix cache hints (docs/api.md)
    strata_checkpoint: bool = True

    @field_validator("input", mode="before")
    @classmethod
    def _messages_are_typed(cls, value):
        """A message may omit `type` (EasyInputMessage); give it one so the item union is tagged."""
        if isinstance(value, list):
            return [{**v, "type": "message"} if isinstance(v, dict) and "type" not in v else v for v in value]
        return value
