"""--chat-template (a file or the template itself) replaces the model's chat template: in the offline API's chat
prompts and in a live `strata serve`, whose chat completions are prompted with it (what /tokenize shows of the
messages, what usage counts); a value that is neither a file nor a Jinja template, or does not parse, is a clear
error before anything loads."""

from __future__ import annotations

import pytest

from live_server import MODEL, served
from strata import LLM, SamplingParams
from strata.tokenizer import load_tokenizer, read_chat_template

TEMPLATE = ("{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[ASSISTANT] {% endif %}")
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
RENDERED = "[SYSTEM] Be brief.\n[USER] Hi there\n[ASSISTANT] "


def test_the_offline_api_prompts_with_the_given_template(bundled_gguf):
    with LLM(bundled_gguf, dtype="float32", device="cpu", max_num_seqs=2, chat_template=TEMPLATE) as llm:
        ids = llm.encode_chat(CHAT)
        assert llm.tokenizer.decode(ids) == RENDERED
        out = llm.chat(CHAT, SamplingParams(temperature=0.0, max_tokens=3))[0]
        assert out.prompt_token_ids == ids


def test_a_server_prompts_chats_with_a_template_file(tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text(TEMPLATE, encoding="utf-8")
    with served(MODEL, "strata-template-", "--chat-template", str(path), "--max-model-len", "512") as server:
        tokens = server.post("/tokenize", {"messages": CHAT}).json()["tokens"]
        assert server.post("/detokenize", {"tokens": tokens}).json()["prompt"] == RENDERED
        reply = server.post("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 2}).json()
        assert reply["usage"]["prompt_tokens"] == len(tokens)


@pytest.mark.parametrize("source, message", [
    ("no-such-file.jinja", "neither a file nor a Jinja template"),
    ("{% for m in messages %}{{ m }}", "not a valid Jinja template"),
])
def test_bad_templates_are_clear_errors(source, message):
    with pytest.raises(ValueError, match=message):
        read_chat_template(source)


def test_loop_controls_parse_as_hf_renders_them():
    template = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m['content'] }}{% endfor %}"
    assert read_chat_template(template) == template


def test_a_model_without_a_tokenizer_refuses_a_template():
    with pytest.raises(ValueError, match="needs a tokenizer"):
        load_tokenizer("random:qwen3-30b-a3b", TEMPLATE)
