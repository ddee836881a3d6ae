"""Structured output enforced while decoding, through a live `strata serve` of a tiny random model that
speaks the bundled SmolLM2 tokenizer (tests/tiny_tokenized.py), with the official `openai` and `anthropic`
clients on loopback: a JSON Schema whose output parses and validates for 20 seeded prompts (the same
model writes no JSON without the constraint), json_object, vLLM's structured_outputs and guided_* fields,
tool_choice required / named (OpenAI) and any / tool (Anthropic) giving valid calls, logit_bias, and
400s naming the problem for invalid schemas, unsatisfiable or broken grammars and bad values."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import anthropic
import jsonschema
import openai
import pytest

from live_server import API_KEY, served
from tiny_tokenized import save_tokenized_tiny_model, smollm2_tokenizer

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 130},
                         "role": {"enum": ["admin", "user", "guest"]},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}},
          "required": ["name", "age", "role", "tags"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
CLOCK = {"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
         "required": ["zone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": CLOCK}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    folder = save_tokenized_tiny_model("llama", str(tmp_path_factory.mktemp("tiny-tokenized")))
    with served(folder, "strata-structured-", "--max-num-seqs", "8", "--max-model-len", "512",
                "--engine-spare", "off") as live:
        yield live


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def ask(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Describe person number {i} as JSON."}]


def test_json_schema_output_parses_and_validates_for_20_seeded_prompts(client, model):
    unconstrained = client.chat.completions.create(model=model, messages=ask(0), max_tokens=40, temperature=0)
    with pytest.raises(json.JSONDecodeError):  # the model alone writes no JSON
        json.loads(unconstrained.choices[0].message.content)
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}

    def constrained(i: int):
        return client.chat.completions.create(model=model, messages=ask(i), max_tokens=200, temperature=1.0, seed=i,
                                              response_format=response_format)

    outputs = set()
    with ThreadPoolExecutor(8) as pool:  # the server's 8 slots decode them together, each with its own matcher
        answers = list(pool.map(constrained, range(20)))
    for out in answers:
        choice = out.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        value = json.loads(choice.message.content)
        jsonschema.validate(value, PERSON)
        outputs.add(choice.message.content)
    assert len(outputs) >= 15  # sampled, seeded differently: not one answer repeated


def test_json_schema_stream_equals_non_stream(client, model):
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    kwargs = dict(model=model, messages=ask(3), max_tokens=200, temperature=0.0, response_format=response_format)
    full = client.chat.completions.create(**kwargs).choices[0].message.content
    chunks = client.chat.completions.create(**kwargs, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == full
    jsonschema.validate(json.loads(full), PERSON)


def test_json_object(client, model):
    for seed in range(3):
        out = client.chat.completions.create(model=model, messages=ask(seed), max_tokens=300, temperature=0.7,
                                             seed=seed, response_format={"type": "json_object"})
        assert out.choices[0].finish_reason == "stop"
        assert isinstance(json.loads(out.choices[0].message.content), dict)


@pytest.mark.parametrize("extra, accepts", [
    ({"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2,4}"}}, lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", t)),
    ({"structured_outputs": {"choice": ["red", "green", "blue"]}}, lambda t: t in ("red", "green", "blue")),
    ({"structured_outputs": {"grammar": 'start: "(" NUM ("+" NUM)* ")"\nNUM: /[1-9]/'}},
     lambda t: re.fullmatch(r"\([1-9](\+[1-9])*\)", t)),
    ({"guided_grammar": 'root ::= "x" [yz]+ "w"'}, lambda t: re.fullmatch(r"x[yz]+w", t)),
    ({"guided_json": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4}},
     lambda t: isinstance(json.loads(t), list) and 2 <= len(json.loads(t)) <= 4),
])
def test_vllm_structured_outputs_on_completions(client, model, extra, accepts):
    for seed in range(3):
        out = client.completions.create(model=model, prompt=f"Answer {seed}:", max_tokens=60, temperature=1.0,
                                        seed=seed, extra_body=extra)
        assert out.choices[0].finish_reason == "stop" and accepts(out.choices[0].text), out.choices[0].text


def check_call(name: str, arguments) -> None:
    jsonschema.validate(json.loads(arguments) if isinstance(arguments, str) else arguments, SCHEMAS[name])


def test_tool_choice_required_and_named(client, model):
    names = set()
    for seed in range(4):
        out = client.chat.completions.create(model=model, messages=ask(seed), tools=TOOLS, tool_choice="required",
                                             parallel_tool_calls=False, max_tokens=100, temperature=1.0, seed=seed)
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
        call = choice.message.tool_calls[0].function
        check_call(call.name, call.arguments)
        names.add(call.name)
    out = client.chat.completions.create(model=model, messages=ask(9), tools=TOOLS, max_tokens=200, temperature=0.0,
                                         tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = out.choices[0].message.tool_calls
    assert out.choices[0].finish_reason == "tool_calls" and calls
    for call in calls:  # parallel calls allowed here: each one is get_time
        assert call.function.name == "get_time"
        check_call("get_time", call.function.arguments)


def test_anthropic_tool_choice_any_and_tool(live, model):
    client = anthropic.Anthropic(base_url=live.base_url, api_key=API_KEY, max_retries=0, timeout=300)
    tools = [{"name": t["function"]["name"], "description": "d", "input_schema": t["function"]["parameters"]}
             for t in TOOLS]
    for tool_choice in ({"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "get_weather"}):
        out = client.messages.create(model=model, max_tokens=200, tools=tools, tool_choice=tool_choice,
                                     messages=[{"role": "user", "content": "What is it like?"}])
        uses = [block for block in out.content if block.type == "tool_use"]
        assert out.stop_reason == "tool_use" and uses
        for use in uses:
            check_call(use.name, use.input)
        if tool_choice["type"] == "tool":
            assert {use.name for use in uses} == {"get_weather"}
        else:
            assert len(uses) == 1
    with pytest.raises(anthropic.BadRequestError, match="not one of the request's tools"):
        client.messages.create(model=model, max_tokens=10, tools=tools, tool_choice={"type": "tool", "name": "nope"},
                               messages=[{"role": "user", "content": "hi"}])


def test_logit_bias_forces_a_token_under_greedy(client, model):
    token = 6354  # an ordinary token of the vocabulary, which the model does not pick by itself
    forced = smollm2_tokenizer().decode([token] * 5)
    baseline = client.completions.create(model=model, prompt="Hello", max_tokens=5, temperature=0.0)
    out = client.completions.create(model=model, prompt="Hello", max_tokens=5, temperature=0.0,
                                    logit_bias={str(token): 100})
    assert out.choices[0].text == forced != baseline.choices[0].text
    chat = client.chat.completions.create(model=model, messages=ask(1), max_tokens=5, temperature=0.0,
                                          logit_bias={str(token): 100})
    assert chat.choices[0].message.content == forced


@pytest.mark.parametrize("body, param, message", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frobnicate"}}}},
     "response_format.json_schema.schema", "not a valid JSON Schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"allOf": [{"type": "string"}, {"type": "integer"}]}}}},
     "response_format.json_schema.schema", "Unsatisfiable schema"),
    ({"structured_outputs": {"grammar": "start: undefined_rule"}}, "structured_outputs", "unknown name"),
    ({"structured_outputs": {"regex": "a(b"}}, "structured_outputs", "unclosed group"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one of"),
    ({"guided_json": {"type": "integer", "minimum": 5, "maximum": 1}}, "guided_json", "nsatisfiable"),
    ({"structured_outputs": {"json": {"type": 5}}}, "structured_outputs", "not a valid JSON Schema"),
    ({"structured_outputs": {"choice": ["a"]}, "response_format": {"type": "json_object"}}, "structured_outputs",
     "give only one of them"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name", "not one of the request's tools"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"logit_bias": {"5": 101}}, "logit_bias", "in \\[-100, 100\\]"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias", "not a token id of this model"),
    ({"logit_bias": {"abc": 1}}, "logit_bias", "must be token ids"),
])
def test_bad_constraints_are_400s_naming_the_problem(live, model, body, param, message):
    response = live.post("/v1/chat/completions", {"model": model, "messages": ask(0), "max_tokens": 5, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and re.search(message, error["message"]), error


def test_a_template_that_opens_think_keeps_its_reasoning_before_the_constraint():
    from strata.server import structured_output
    from strata.server.protocol_openai import ChatCompletionRequest

    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                 response_format={"type": "json_object"})
    constraint, field = structured_output.requested(body, starts_in_reasoning=True)
    assert field == "response_format" and constraint.grammar.startswith("start: think %json")
    assert structured_output.requested(body)[0].json_object
