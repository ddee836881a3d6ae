"""The live view behind the web Monitor (GET /v1/monitor): a rolling per-second history of output tokens,
the requests in flight and the last finished ones, fed by the metrics' request trackers (one hook, no
second bookkeeping), plus engine status, host CPU/RAM read from /proc and GPU numbers when torch is
already loaded in this process. It must not import torch or any model code (the server holds no model)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections import deque
from dataclasses import dataclass

HISTORY_S = 300      # seconds of tok/s history kept for the chart
NUM_RECENT = 20      # finished requests listed


@dataclass
class InFlight:
    tracker: object              # metrics.RequestTracker: latencies and token counts
    number: int                  # 1, 2, … in arrival order since the server started
    scheduled_at_start: int      # the engine's scheduled-token total when the request arrived


class Monitor:
    """Listener of `metrics.RequestTracker` events; `snapshot(state)` is the /v1/monitor body."""

    def __init__(self, engine_config=None, engine_status=lambda: {}) -> None:
        """`engine_status()`: the engine's last status message (dict), read when a request starts."""
        self.engine_config, self.engine_status = engine_config, engine_status
        self.active: dict[int, InFlight] = {}         # id(tracker) -> the request in flight
        self.recent: deque[dict] = deque(maxlen=NUM_RECENT)
        self.tokens_per_second: deque[list[int]] = deque()   # [unix second, output tokens], oldest first
        self.num_requests = 0
        self._cpu_prev: tuple[int, int] | None = None

    # ---- tracker hooks ---------------------------------------------------------------------------

    def on_start(self, tracker) -> None:
        self.num_requests += 1
        self.active[id(tracker)] = InFlight(tracker, self.num_requests, _scheduled_tokens(self.engine_status()))

    def on_tokens(self, num_tokens: int) -> None:
        second = int(time.time())
        if self.tokens_per_second and self.tokens_per_second[-1][0] == second:
            self.tokens_per_second[-1][1] += num_tokens
        else:
            self.tokens_per_second.append([second, num_tokens])
        while self.tokens_per_second and self.tokens_per_second[0][0] <= second - HISTORY_S:
            self.tokens_per_second.popleft()

    def on_end(self, tracker, reason: str) -> None:
        request = self.active.pop(id(tracker), None)
        if request is not None:
            self.recent.appendleft({**request_numbers(request), "finish_reason": reason, "finished_at": time.time()})

    # ---- the snapshot ----------------------------------------------------------------------------

    def history(self, now: float | None = None) -> list[int]:
        """Output tokens per second over the last HISTORY_S complete seconds, oldest first."""
        last = int(now if now is not None else time.time()) - 1
        counts = dict((s, n) for s, n in self.tokens_per_second)
        return [counts.get(s, 0) for s in range(last - HISTORY_S + 1, last + 1)]

    def activity(self, engine_state: str, status: dict) -> dict:
        """idle / reading_prompt / generating / the engine's state, with the requests in flight."""
        if engine_state != "ready":
            return {"state": engine_state}
        active = [request_numbers(r) for r in self.active.values()]
        if len(active) == 1:
            active[0]["prompt_progress"] = prompt_progress(next(iter(self.active.values())), status)
        reading = [r for r in active if r["output_tokens"] == 0]
        generating = [r for r in active if r["output_tokens"] > 0]
        state = "generating" if generating else "reading_prompt" if reading else "idle"
        return {"state": state, "reading_prompt": len(reading), "generating": len(generating), "requests": active}

    def snapshot(self, state) -> dict:
        client, stats = state.client, state.client.stats
        status = stats.status or {}
        history = self.history()
        return {"time": time.time(), "model": state.model_name, "uptime_s": time.time() - state.started,
                "engine": {"state": stats.state, "pid": client.pid, "restarts": stats.restarts,
                           "last_error": stats.last_error,
                           **{k: v for k, v in client.info.items() if k not in ("status", "eos_token_ids")},
                           "config": _config_dict(self.engine_config)},
                "activity": self.activity(stats.state, status),
                "throughput": {"history_tok_s": history, "last_tok_s": history[-1],
                               "mean_tok_s_10s": sum(history[-10:]) / 10,
                               "total_requests": self.num_requests},
                "slots": {"total": status.get("max_num_seqs"), "running": status.get("num_running"),
                          "free": status.get("num_free_slots"), "waiting": status.get("num_waiting")},
                "kv_blocks": {"total": status.get("kv_blocks_total"), "free": status.get("kv_blocks_free")},
                "speculation": _speculation(status),
                "cache": {**(status.get("cache") or {}),
                          "prompt_tokens_reused": (status.get("steps") or {}).get("prompt_tokens_reused")},
                "steps": status.get("steps") or {},
                "experts": status.get("experts"),
                "gpu": status.get("gpu"),  # measured by the engine process, which owns the device
                "host": {**self.cpu_numbers(), **memory_numbers(), "engine_rss_bytes": rss_bytes(client.pid)},
                "recent_requests": list(self.recent)}

    def cpu_numbers(self) -> dict:
        """Host CPU busy fraction since the previous call (None on the first), from /proc/stat."""
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return {"cpu_busy": None, "num_cpus": os.cpu_count()}
        total, idle = sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)
        busy = None
        if self._cpu_prev is not None and total > self._cpu_prev[0]:
            busy = 1.0 - (idle - self._cpu_prev[1]) / (total - self._cpu_prev[0])
        self._cpu_prev = (total, idle)
        return {"cpu_busy": busy, "num_cpus": os.cpu_count(), "load_1m": os.getloadavg()[0]}


def request_numbers(request: InFlight) -> dict:
    tracker, now = request.tracker, time.perf_counter()
    first = tracker.first_token_at
    decode_s = (tracker.last - first) if first is not None else 0.0
    return {"id": request.number, "prompt_tokens": tracker.num_prompt_tokens,
            "cached_tokens": tracker.num_cached_tokens, "output_tokens": tracker.num_output_tokens,
            "ttft_s": (first - tracker.started) if first is not None else None,
            "elapsed_s": now - tracker.started,   # called at the end for finished requests
            "decode_tok_s": (tracker.num_output_tokens - 1) / decode_s if decode_s > 0 else None}


def _scheduled_tokens(status: dict) -> int:
    return ((status or {}).get("steps") or {}).get("num_scheduled_tokens", 0)


def prompt_progress(request: InFlight, status: dict) -> float | None:
    """Fraction of the prompt read so far, from the engine's scheduled-token total since the request
    started: exact only while it is the one request in flight (the caller checks), so an estimate."""
    tracker = request.tracker
    if tracker.num_output_tokens:
        return 1.0
    to_read = tracker.num_prompt_tokens - tracker.num_cached_tokens
    if to_read <= 0:
        return None
    done = _scheduled_tokens(status) - request.scheduled_at_start
    return max(0.0, min(done / to_read, 1.0))


def _speculation(status: dict) -> dict:
    steps = status.get("steps") or {}
    return {"method": status.get("speculative_method"), "num_verify_windows": steps.get("num_verify_windows"),
            "num_draft_tokens": steps.get("num_draft_tokens"), "num_accepted_tokens": steps.get("num_accepted_tokens"),
            "mean_accepted_length": steps.get("mean_accepted_length"),
            "acceptance_per_position": steps.get("acceptance_per_position")}


def _config_dict(config) -> dict | None:
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None


def memory_numbers() -> dict:
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split()[1:2]}
    except (OSError, ValueError):
        return {"mem_total_bytes": None, "mem_available_bytes": None}
    return {"mem_total_bytes": info.get("MemTotal"), "mem_available_bytes": info.get("MemAvailable")}


def rss_bytes(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


