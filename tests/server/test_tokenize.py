"""/tokenize and /detokenize on a live `strata serve` (bundled model): a prompt's tokens are HF transformers'
tokenizer's on the same GGUF; chat messages count what /v1/chat/completions bills as prompt tokens; detokenize
inverts tokenize; llama.cpp's field names work too; bad bodies are 400s naming the field, and the API key is
required as everywhere else."""

from __future__ import annotations

import os

import httpx
import pytest

from live_server import MODEL

TEXT = "Hello there, how are you doing on this fine Saturday?"
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is two plus two?"}]


@pytest.fixture(scope="module")
def hf_tokenizer(bundled_gguf):
    from transformers import AutoTokenizer

    from fast_gguf import fast_gguf_arrays

    folder, name = os.path.split(bundled_gguf)
    with fast_gguf_arrays():
        return AutoTokenizer.from_pretrained(folder, gguf_file=name)


def test_a_prompt_tokenizes_as_hf_and_detokenizes_back(server, hf_tokenizer):
    reply = server.post("/tokenize", {"model": MODEL, "prompt": TEXT, "return_token_strs": True}).json()
    assert reply["tokens"] == hf_tokenizer.encode(TEXT) and reply["count"] == len(reply["tokens"])
    assert reply["token_strs"] == hf_tokenizer.convert_ids_to_tokens(reply["tokens"])
    assert reply["max_model_len"] == server.get("/v1/models").json()["data"][0]["max_model_len"]
    back = server.post("/detokenize", {"model": MODEL, "tokens": reply["tokens"]}).json()
    assert back["prompt"] == back["content"] == TEXT


def test_messages_count_what_a_chat_completion_bills(server):
    reply = server.post("/tokenize", {"messages": CHAT}).json()
    chat = server.post("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 1}).json()
    assert reply["count"] == chat["usage"]["prompt_tokens"] == len(reply["tokens"])
    without = server.post("/tokenize", {"messages": CHAT, "add_generation_prompt": False}).json()
    assert without["count"] < reply["count"] and reply["tokens"][:without["count"]] == without["tokens"]


def test_llama_cpp_names(server, hf_tokenizer):
    reply = server.post("/tokenize", {"content": TEXT, "with_pieces": True}).json()
    ids = hf_tokenizer.encode(TEXT)
    assert [t["id"] for t in reply["tokens"]] == ids
    assert [t["piece"] for t in reply["tokens"]] == hf_tokenizer.convert_ids_to_tokens(ids)
    assert server.post("/detokenize", {"tokens": ids}).json()["content"] == TEXT


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {"prompt": TEXT, "messages": CHAT}, "prompt"),
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": TEXT, "model": "other-model"}, "model"),
    ("/detokenize", {"tokens": [1, -5]}, "tokens"),
    ("/detokenize", {"tokens": [10 ** 9]}, "tokens"),
])
def test_bad_bodies_are_400_naming_the_field(server, path, body, param):
    response = server.post(path, body)
    assert response.status_code in (400, 404), response.text
    assert response.json()["error"]["param"] == param


def test_the_api_key_is_required(server):
    response = httpx.post(server.base_url + "/tokenize", json={"prompt": TEXT})
    assert response.status_code == 401
