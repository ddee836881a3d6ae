"""Health latency while large bodies are handled and 3 streams run; usage: loopbench.py TREE"""
import json, sys, threading, time, statistics
tree = sys.argv[1]
sys.path[:0] = [tree + "/tests", tree]
import httpx
from live_server import start_serve, stop_serve, attach, MODEL
sys.path.insert(0, "/work/main/tests/server")
reg = {}
start_serve(reg, "loopbench-", "--max-model-len", "2048", "--max-num-seqs", "16")
try:
    srv = attach(reg)
    while srv.status()["engine"]["spare"] == "starting":
        time.sleep(0.5)
    def chat(content, stream=False, max_tokens=4, messages=None):
        return {"model": MODEL, "messages": messages or [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": stream}
    stop = threading.Event()
    def stream():
        with httpx.stream("POST", srv.base_url + "/v1/chat/completions", timeout=300, headers=srv.headers,
                          json=chat("Tell me a long story.", True, 1900)) as r:
            for line in r.iter_lines():
                if stop.is_set(): return
    streams = [threading.Thread(target=stream, daemon=True) for _ in range(3)]
    for s in streams: s.start()
    time.sleep(3)
    bodies = {"4MB string": json.dumps(chat("x" * 4_000_000)).encode(),
              "4MB 110k messages": json.dumps(chat("", messages=[{"role": "user", "content": "hi"}] * 110_000)).encode(),
              "1MB prompt": json.dumps(chat("hello world, this is a long prompt. " * 28_000)).encode()}
    for name, body in bodies.items():
        lat, done = [], threading.Event()
        def health():
            with httpx.Client(timeout=30) as c:
                while not done.is_set():
                    t = time.monotonic(); c.get(srv.base_url + "/health"); lat.append(time.monotonic() - t); time.sleep(0.01)
        def send():
            with httpx.Client(timeout=120, headers={**srv.headers, "content-type": "application/json"}) as c:
                for _ in range(4):
                    r = c.post(srv.base_url + "/v1/chat/completions", content=body); assert r.status_code == 400, r.text
        h = threading.Thread(target=health); h.start()
        t0 = time.monotonic()
        senders = [threading.Thread(target=send) for _ in range(2)]
        for s in senders: s.start()
        for s in senders: s.join()
        dt = time.monotonic() - t0
        done.set(); h.join()
        lat.sort()
        print(f"{name}: 8 requests in {dt:.2f} s; /health n={len(lat)} p50 {1e3*statistics.median(lat):.1f} ms "
              f"p99 {1e3*lat[int(0.99*len(lat))]:.1f} ms max {1e3*lat[-1]:.1f} ms", flush=True)
    stop.set()
finally:
    stop_serve(reg)
