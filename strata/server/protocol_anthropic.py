"""Pydantic models of the Anthropic Messages request bodies (/v1/messages, /v1/messages/count_tokens).

Content blocks are a tagged union on `type`: text, tool_use, tool_result, thinking. Images and
documents are not supported (400 naming the block)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from strata.server.protocol_openai import MAX_SEED


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class TextBlock(_Body):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Body):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict


class ToolResultBlock(_Body):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Body):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


ContentBlock = Annotated[Union[TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock],
                         Field(discriminator="type")]


class Message(_Body):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class AnthropicTool(_Body):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict


class ThinkingConfig(_Body):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=0)


class ToolChoice(_Body):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class CountTokensRequest(_Body):
    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool = False
    metadata: dict | None = None
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    strata_pin_prefix: bool | None = None   # Strata's prefix cache hints (docs/api.md)
    strata_checkpoint: bool = True
