"""Request limits checked on the parsed body before any rendering or tokenization: message count,
prompt characters, stop strings, tools and schema sizes (400s naming the field and the server option
that sets the limit), text that is not valid Unicode, and JSON Schemas (tools, response_format)
checked with `jsonschema`. Pure checks on plain values: no engine, no tokenizer."""

from __future__ import annotations

import json
from collections.abc import Iterable

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from strata.server.config import ServerConfig
from strata.server.errors import APIError


def check_count(count: int, limit: int, param: str, option: str) -> None:
    if count > limit:
        raise APIError(400, f"{param} has {count} entries; this server accepts at most {limit} ({option})", param)


def _as_text(value, param: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:
        raise APIError(400, f"{param} is nested too deeply", param) from None


def check_text(config: ServerConfig, texts: Iterable[tuple[str, object]], what: str = "messages") -> None:
    """`texts`: (param, str or JSON value) pairs of everything the prompt is made of."""
    total = 0
    for param, value in texts:
        text = _as_text(value, param)
        total += len(text)
        if total > config.max_prompt_chars:
            raise APIError(400, f"the {what} hold more than {config.max_prompt_chars} characters "
                                f"(--max-prompt-chars)", param)
        check_unicode(text, param)


def check_unicode(text: str, param: str) -> None:
    """A JSON string may hold an unpaired UTF-16 surrogate (\\ud800), which no tokenizer can encode."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise APIError(400, f"{param} holds an unpaired UTF-16 surrogate (U+{ord(text[e.start]):04X}), which is "
                            f"not valid Unicode", param) from None


def check_stop(config: ServerConfig, stop: str | list[str] | None, param: str) -> None:
    strings = [stop] if isinstance(stop, str) else list(stop or ())
    check_stop_count(config, len(strings), param)
    for i, s in enumerate(strings):
        if len(s) > config.max_stop_chars:
            raise APIError(400, f"{param}.{i} is {len(s)} characters long; this server accepts at most "
                                f"{config.max_stop_chars} (--max-stop-chars)", f"{param}.{i}")
        check_unicode(s, f"{param}.{i}")


def check_stop_count(config: ServerConfig, count: int, param: str) -> None:
    if count > config.max_stop_strings:
        raise APIError(400, f"{param} has {count} strings; this server accepts at most "
                            f"{config.max_stop_strings} (--max-stop-strings)", param)


def check_schema(config: ServerConfig, schema: dict, param: str) -> None:
    """400 unless `schema` is a JSON Schema (by its $schema draft, else 2020-12) of at most max_schema_bytes."""
    size = len(_as_text(schema, param).encode("utf-8", "surrogatepass"))
    if size > config.max_schema_bytes:
        raise APIError(400, f"{param} is {size} bytes of JSON; this server accepts at most {config.max_schema_bytes} "
                            f"(--max-schema-bytes)", param)
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.path) or "the top level"
        raise APIError(400, f"{param} is not a valid JSON Schema: at {where}: {e.message[:300]}", param) from None
    except RecursionError:
        raise APIError(400, f"{param} is nested too deeply", param) from None
