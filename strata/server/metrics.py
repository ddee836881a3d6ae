"""Prometheus metrics: vLLM's names where vLLM has the metric (so existing dashboards work), `strata:`
names for the rest. Request-level numbers are observed in the server from the deltas it relays;
occupancy gauges and the engine's step / speculation totals are read from its last status message at
scrape time (the totals restart from 0 with a new engine process, which Prometheus reads as a reset).
An optional listener (the web Monitor) hears each request start, produce tokens and end."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from strata.types import TokenDelta

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                    40.0, 80.0)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
FAILURE_REASONS = ("error", "engine_error")  # counted apart from vllm:request_success


class Metrics:
    def __init__(self, model_name: str, listener=None) -> None:
        """`listener`: an object with on_start(tracker), on_tokens(n), on_end(tracker, reason)."""
        self.listener = listener
        self.registry = r = CollectorRegistry()
        labels = {"model_name": model_name}
        lbl = list(labels)
        self._labels = labels
        self.running = Gauge("vllm:num_requests_running", "requests in engine slots", lbl, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "requests queued for a slot", lbl, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "fraction of KV blocks in use (0-1)", lbl, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "prompt tokens of finished requests", lbl, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "generated tokens", lbl, registry=r)
        self.success = Counter("vllm:request_success", "requests that finished (stop, length or abort); failures are "
                               "strata:failed_requests", lbl + ["finished_reason"], registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "time to first token", lbl,
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "time between output deltas", lbl,
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "request latency", lbl,
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_hist = Histogram("vllm:request_prompt_tokens", "prompt tokens per request", lbl,
                                     buckets=_TOKEN_BUCKETS, registry=r)
        self.generation_hist = Histogram("vllm:request_generation_tokens", "generated tokens per request", lbl,
                                         buckets=_TOKEN_BUCKETS, registry=r)
        self.engine_up = Gauge("strata:engine_up", "1 while the engine process is ready", registry=r)
        self.engine_restarts = Gauge("strata:engine_restarts", "engine processes started after a failure",
                                     registry=r)
        self.engine_failures = Counter("strata:engine_failed_requests", "requests ended by an engine failure",
                                       registry=r)
        self.failures = Counter("strata:failed_requests", "requests ended by a failure: error (the engine failed "
                                "the request) or engine_error (the engine process died or was unavailable)",
                                lbl + ["reason"], registry=r)
        self.free_slots = Gauge("strata:free_slots", "engine slots free", registry=r)
        self.kv_blocks_free = Gauge("strata:kv_blocks_free", "KV blocks free", registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "prompt tokens looked up in the prefix cache",
                                      lbl, registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "prompt tokens found in the prefix cache", lbl,
                                   registry=r)
        self._stats = None
        r.register(_EngineTotals(self))

    def track(self, num_prompt_tokens: int) -> RequestTracker:
        return RequestTracker(self, num_prompt_tokens)

    def render(self, stats) -> bytes:
        self._stats = stats
        status = stats.status or {}
        self.running.labels(**self._labels).set(status.get("num_running", 0))
        self.waiting.labels(**self._labels).set(status.get("num_waiting", 0))
        total = status.get("kv_blocks_total") or 0
        free = status.get("kv_blocks_free", 0)
        self.kv_usage.labels(**self._labels).set((total - free) / total if total else 0.0)
        self.engine_up.set(1 if stats.state == "ready" else 0)
        self.engine_restarts.set(stats.restarts)
        self.free_slots.set(status.get("num_free_slots", 0))
        self.kv_blocks_free.set(free)
        return generate_latest(self.registry)


class RequestTracker:
    """Observes one request's latencies and token counts from the deltas it relays."""

    def __init__(self, metrics: Metrics, num_prompt_tokens: int) -> None:
        self.metrics, self.num_prompt_tokens = metrics, num_prompt_tokens
        self.started = self.last = time.perf_counter()
        self.num_output_tokens = 0
        self.num_cached_tokens = 0
        self.first_token_at: float | None = None
        self.done = False
        if metrics.listener is not None:
            metrics.listener.on_start(self)

    def on_delta(self, delta: TokenDelta) -> None:
        now = time.perf_counter()
        m, labels = self.metrics, self.metrics._labels
        self.num_cached_tokens = max(self.num_cached_tokens, delta.num_cached_tokens)
        if delta.new_token_ids:
            if self.first_token_at is None:
                self.first_token_at = now
                m.ttft.labels(**labels).observe(now - self.started)
            else:
                m.itl.labels(**labels).observe(now - self.last)
            self.last = now
            self.num_output_tokens += len(delta.new_token_ids)
            m.generation_tokens.labels(**labels).inc(len(delta.new_token_ids))
            if m.listener is not None:
                m.listener.on_tokens(len(delta.new_token_ids))

    def on_end(self, reason: str) -> None:
        if self.done:
            return
        self.done = True
        m, labels = self.metrics, self.metrics._labels
        if reason in FAILURE_REASONS:
            m.failures.labels(**labels, reason=reason).inc()
        else:
            m.success.labels(**labels, finished_reason=reason).inc()
        m.prompt_tokens.labels(**labels).inc(self.num_prompt_tokens)
        m.e2e.labels(**labels).observe(time.perf_counter() - self.started)
        m.prompt_hist.labels(**labels).observe(self.num_prompt_tokens)
        m.generation_hist.labels(**labels).observe(self.num_output_tokens)
        m.prefix_queries.labels(**labels).inc(self.num_prompt_tokens)
        m.prefix_hits.labels(**labels).inc(self.num_cached_tokens)
        if reason == "engine_error":
            m.engine_failures.inc()
        if m.listener is not None:
            m.listener.on_end(self, reason)


class _EngineTotals:
    """Custom collector: the engine's own step and speculation counters (status["steps"])."""

    _COUNTERS = (("vllm:spec_decode_num_drafts", "num_verify_windows", "verification windows with drafts"),
                 ("vllm:spec_decode_num_draft_tokens", "num_draft_tokens", "draft tokens proposed"),
                 ("vllm:spec_decode_num_accepted_tokens", "num_accepted_tokens", "draft tokens accepted"),
                 ("strata:engine_steps", "num_steps", "engine steps"),
                 ("strata:scheduled_tokens", "num_scheduled_tokens", "tokens computed by the engine"))

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self):
        stats = self.metrics._stats
        steps = ((stats.status if stats is not None else None) or {}).get("steps") or {}
        for name, key, doc in self._COUNTERS:
            yield CounterMetricFamily(name, doc, value=steps.get(key, 0))
        mean = GaugeMetricFamily("strata:spec_decode_mean_accepted_length",
                                 "tokens emitted per verification window, bonus included")
        mean.add_metric([], steps.get("mean_accepted_length", 0.0))
        yield mean
        per_position = GaugeMetricFamily("strata:spec_decode_acceptance_rate", "acceptance rate per draft position",
                                         labels=["position"])
        for position, rate in enumerate(steps.get("acceptance_per_position", [])):
            per_position.add_metric([str(position)], rate)
        yield per_position
        yield from self._expert_metrics(((stats.status if stats is not None else None) or {}).get("experts") or {})

    _EXPERT_GAUGES = (("strata:expert_gpu_hit_rate", "gpu_hit_rate", "share of routed (token, k) pairs served by "
                       "device-resident experts"),
                      ("strata:expert_cpu_share", "cpu_share", "share of routed pairs computed by the CPU pool"),
                      ("strata:expert_pcie_share", "pcie_share", "share of routed pairs run after a PCIe copy"),
                      ("strata:experts_touched_per_layer", "mean_experts_touched_per_layer",
                       "distinct experts a step touches per MoE layer (mean)"))
    _EXPERT_COUNTERS = (("strata:expert_swaps", "swaps", "hot-set swaps"),
                        ("strata:expert_bytes_moved", "bytes_moved", "expert bytes copied to the device"))

    def _expert_metrics(self, experts: dict):
        if not experts:
            return
        for name, key, doc in self._EXPERT_GAUGES:
            if key in experts:
                yield GaugeMetricFamily(name, doc, value=experts[key])
        for name, key, doc in self._EXPERT_COUNTERS:
            if key in experts:
                yield CounterMetricFamily(name, doc, value=experts[key])
