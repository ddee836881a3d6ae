"""Chat rendering for the server: normalized messages -> prompt token ids through the model's chat
template, with tools and the thinking switch.

Both APIs convert their messages to one normalized form first: {"role", "content": str,
"tool_calls": [{"id", "name", "arguments": dict}], "tool_call_id"}. Known per-request stamps in system
messages (Claude Code's `cch=` and `cc_version=`) get a fixed value before rendering, so a conversation's
prompt keeps its prefix from turn to turn and the prefix cache finds it (--normalize-prompt-stamps).
A template that knows tool calls gets them natively (HF's `tools=` and `tool_calls`); for one that does
not, tools are described in the system message and calls/results written as Hermes/Qwen text
(`<tool_call>{json}</tool_call>`, `<tool_response>…</tool_response>`), the format the output parser reads
back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from strata.reasoning import THINK_OPEN, thinking_tokens
from strata.server.errors import APIError
from strata.tokenizer import render_chat_text

# Claude Code stamps its system prompt per request (`x-anthropic-billing-header: cc_version=2.0.14.abc;
# cc_entrypoint=cli; cch=1a2b3;`): the values of these keys become STAMP_PLACEHOLDER
_STAMPS = re.compile(r"\b(cch|cc_version)=[^;\s]+")
STAMP_PLACEHOLDER = "0"

_TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}}\n</tool_call>")


@dataclass
class Rendered:
    prompt_token_ids: list[int]
    starts_in_reasoning: bool   # the template opened a <think> block in the generation prompt


@dataclass
class ToolSpec:
    name: str
    description: str | None
    parameters: dict

    def as_openai(self) -> dict:
        return {"type": "function", "function": {"name": self.name, "description": self.description or "",
                                                 "parameters": self.parameters}}


class ChatTemplate:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        source = getattr(tokenizer, "chat_template", None) or ""
        self.native_tools = "tool_calls" in source
        self.has_thinking_switch = "enable_thinking" in source
        self.thinking = thinking_tokens(tokenizer)  # None: the model does not think
        self.normalize_stamps = True                # ServerConfig.normalize_prompt_stamps
        # No token is longer than its vocabulary string (byte-level and SentencePiece vocabularies spell a
        # token with at least one character per byte), so a text of C characters has at least
        # C / max_token_chars tokens: enough to refuse an over-long prompt without tokenizing it.
        self.max_token_chars = max(map(len, tokenizer.get_vocab()), default=1) if tokenizer is not None else 1
        self.max_prompt_tokens: int | None = None  # the engine's max_model_len, set once it is known

    def encode(self, text: str, add_special_tokens: bool, param: str = "prompt") -> list[int]:
        """Tokenize, refusing first a text too long for the context whatever its tokens. The fast
        tokenizer's batch path gives the GIL back while it works (its single-text path holds it
        throughout), so the event loop keeps running while this runs in a worker thread."""
        min_tokens = len(text) // self.max_token_chars
        if self.max_prompt_tokens is not None and min_tokens >= self.max_prompt_tokens:
            raise APIError(400, f"the prompt has {len(text)} characters, so at least {min_tokens} tokens; the "
                                f"context (max_model_len) is {self.max_prompt_tokens}, which leaves no room for "
                                f"output", param)
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def render(self, messages: list[dict], tools: list[ToolSpec] | None = None,
               enable_thinking: bool | None = None, add_generation_prompt: bool = True) -> Rendered:
        if self.tokenizer is None:
            raise APIError(400, "this model has no tokenizer: use /v1/completions with token ids", "messages")
        if self.normalize_stamps:
            messages = [normalize_stamps(m) for m in messages]
        kwargs = {}
        if enable_thinking is not None and self.has_thinking_switch:
            kwargs["enable_thinking"] = enable_thinking
        if self.native_tools:
            template_messages = [_native(m) for m in messages]
            if tools:
                kwargs["tools"] = [t.as_openai() for t in tools]
        else:
            template_messages = _as_text(messages, tools)
        try:
            text = render_chat_text(self.tokenizer, template_messages, add_generation_prompt, **kwargs)
        except ValueError as e:
            raise APIError(400, str(e), "messages") from e
        except Exception as e:  # jinja errors raised by the template itself (e.g. role order)
            raise APIError(400, f"the chat template rejected the messages: {e}", "messages") from e
        # templates write their own BOS: encoding with special tokens would add a second one
        ids = self.encode(text, add_special_tokens=False, param="messages")
        tail = self.tokenizer.decode(ids[-3:]).rstrip()
        return Rendered(ids, tail.endswith(THINK_OPEN))

    def count(self, messages: list[dict], tools: list[ToolSpec] | None = None,
              enable_thinking: bool | None = None) -> int:
        return len(self.render(messages, tools, enable_thinking).prompt_token_ids)


def normalize_stamps(message: dict) -> dict:
    """A system message with Claude Code's per-request stamps given fixed values (others as they are)."""
    if message["role"] != "system" or "=" not in (message.get("content") or ""):
        return message
    return {**message, "content": _STAMPS.sub(lambda m: f"{m.group(1)}={STAMP_PLACEHOLDER}", message["content"])}


def _native(message: dict) -> dict:
    out = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}}
                             for c in message["tool_calls"]]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return out


def tool_call_text(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _as_text(messages: list[dict], tools: list[ToolSpec] | None) -> list[dict]:
    """Tool-unaware template: tools in the system prompt, calls and results as Hermes text."""
    out: list[dict] = []
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            continue
        if m.get("tool_calls"):
            calls = "\n".join(tool_call_text(c["name"], c["arguments"]) for c in m["tool_calls"])
            content = (content + "\n" if content else "") + calls
        out.append({"role": m["role"], "content": content})
    if tools:
        preamble = _TOOLS_PREAMBLE.format(tools="\n".join(json.dumps(t.as_openai()) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + preamble}
        else:
            out.insert(0, {"role": "system", "content": preamble})
    return out
