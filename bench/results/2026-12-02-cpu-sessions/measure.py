"""Sessions on disk on the bundled SmolLM2 (CPU, float32): a ~1.7K-token chat saved, the server stopped, a
new one restored from the file; the next turn compared with the server that never stopped. Reports save and
restore times, the engine loop's hold (`engine_loop_ms`), and the token gaps of a stream running meanwhile
against a stream alone. Run from the repository root:
    .venv/bin/python bench/results/2026-12-02-cpu-sessions/measure.py /tmp/sessions
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import httpx

sys.path.insert(0, "tests")
from live_server import free_port, wait_healthy  # noqa: E402

DIR = sys.argv[1]


def start():
    port = free_port()
    log = open(tempfile.mktemp(prefix="serve-", suffix=".log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "serve", "smollm2-135m", "--device", "cpu",
                             "--dtype", "float32", "--port", str(port), "--max-model-len", "4096", "--sessions-dir", DIR,
                             "--max-num-batched-tokens", "256", "--engine-hang-timeout-s", "600",
                             "--engine-spare", "off", "--log-level", "warning"],
                            cwd=os.getcwd(), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    started = time.time()
    wait_healthy(url, 300, proc)
    print(f"server up in {time.time() - started:.1f} s", flush=True)
    chat(url, [{"role": "user", "content": "Hello"}], 4)  # first-use costs (kernels, template) out of the numbers
    return proc, url


def stop(proc):
    proc.send_signal(signal.SIGINT)
    proc.wait(30)


def chat(url, messages, max_tokens=16):
    r = httpx.post(url + "/v1/chat/completions", json={"model": "smollm2-135m", "messages": messages,
                                                       "max_tokens": max_tokens, "temperature": 0}, timeout=600)
    r.raise_for_status()
    body = r.json()
    return body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens_details"]["cached_tokens"]


def stream_gaps(url, out):
    stamps = []
    with httpx.stream("POST", url + "/v1/completions", json={"model": "smollm2-135m", "prompt": "Once upon a time",
                      "max_tokens": 48, "temperature": 0, "ignore_eos": True, "stream": True}, timeout=600) as r:
        stamps = [time.time() for line in r.iter_lines() if line.startswith("data: {")]
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    out.append(f"median {gaps[len(gaps) // 2] * 1000:.0f} ms, max {gaps[-1] * 1000:.0f} ms")


def call(url, path, body, during_stream=False):
    out = []
    thread = threading.Thread(target=stream_gaps, args=(url, out))
    if during_stream:
        thread.start()
        time.sleep(3)
    started = time.time()
    r = httpx.post(url + path, json=body, timeout=600)
    wall = time.time() - started
    if during_stream:
        thread.join()
    print(f"{path}{' during a stream' if during_stream else ''}: {r.status_code} {r.json()} wall {wall:.3f} s"
          + (f"; stream gaps {out[0]}" if out else ""), flush=True)


topics = ["rivers", "mountains", "libraries", "bridges", "gardens", "harbors", "forests", "deserts", "cities", "islands"]
text = " ".join(f"Note {i}: the {topics[i % 10]} of region {i} were surveyed in year {1900 + i}, and the report "
                f"lists {i * 7 % 13} findings about {topics[(i * 3) % 10]} and {topics[(i * 7) % 10]}."
                for i in range(50))
messages = [{"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": text + "\nSummarize the notes in one sentence."}]

proc, url = start()
started = time.time()
reply, _ = chat(url, messages)
print(f"turn 1 (1721 prompt tokens, cold) in {time.time() - started:.1f} s", flush=True)
next_turn = messages + [{"role": "assistant", "content": reply},
                        {"role": "user", "content": "Which topic appears most often?"}]
call(url, "/v1/sessions/save", {"filename": "notes.session", "messages": next_turn})
out = []
stream_gaps(url, out)
print(f"stream alone: gaps {out[0]}", flush=True)
call(url, "/v1/sessions/save", {"filename": "notes-2.session", "messages": next_turn}, during_stream=True)
never_stopped = chat(url, next_turn)
print(f"turn 2, never stopped: {never_stopped}", flush=True)
stop(proc)

proc, url = start()
call(url, "/v1/sessions/restore", {"filename": "notes.session"})
restored = chat(url, next_turn)
print(f"turn 2, restored: {restored}; same as never stopped: {restored == never_stopped}", flush=True)
stop(proc)

proc, url = start()
out = []
stream_gaps(url, out)
print(f"stream alone: gaps {out[0]}", flush=True)
call(url, "/v1/sessions/restore", {"filename": "notes-2.session"}, during_stream=True)
stop(proc)
