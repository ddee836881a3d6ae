"""`strata serve --pipeline-parallel-size 2` on the CPU (the engine process and one more stage process, over gloo),
driven by the official openai client: concurrent completions give the tokens one process gives, a chat streams,
and stopping the server leaves no stage process behind."""

from __future__ import annotations

import concurrent.futures
import subprocess

import openai

from live_server import API_KEY, MODEL, served
from strata import LLM, SamplingParams

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,"]


def stage_processes() -> list[str]:
    found = subprocess.run(["pgrep", "-f", "strata.engine.pipeline_workers"], capture_output=True, text=True)
    return found.stdout.split()


def test_a_split_server_answers_as_one_process_and_leaves_no_stage_behind():
    with LLM(MODEL, device="cpu", dtype="float32", max_num_seqs=4) as llm:
        expected = [o.outputs[0].text for o in llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=16))]
    with served(MODEL, "strata-split-", "--pipeline-parallel-size", "2", "--max-num-seqs", "4", "--max-model-len",
                "512", "--engine-spare", "off") as live:
        assert stage_processes()  # the second stage runs beside the engine process
        client = openai.OpenAI(base_url=live.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        model = client.models.list().data[0].id

        def complete(prompt: str) -> str:
            return client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0).choices[0].text

        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            assert list(pool.map(complete, PROMPTS)) == expected
        chunks = list(client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi!"}],
                                                     max_tokens=12, temperature=0, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] in (
            ["length"], ["stop"])
    assert not stage_processes()
