"""The one JSON result schema every `strata bench` mode writes: what ran, where, on which commit.

A document is {bench, command, time, commit, machine, config, results, ...sections}: `results` holds
the mode's arms by name (offline: `strata_c8`, `hf_generate_b1`, … each with `median_output_tok_s`);
modes add named sections beside it (offline: `roofline`, `prefill`, `long_context`, `unavailable_arms`).
Latencies are in milliseconds as {mean, p50, p95, p99}."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from typing import Any


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"mean": statistics.fmean(ordered), "p50": pick(0.5), "p95": pick(0.95), "p99": pick(0.99)}


def machine() -> dict[str, Any]:
    info = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    return info


def commit() -> str:
    """$STRATA_COMMIT when set (a copied tree, e.g. on a GPU machine, may carry stale git metadata), else
    the checkout's short HEAD, else "unknown"."""
    if os.environ.get("STRATA_COMMIT"):
        return os.environ["STRATA_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(__file__)).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_result(path: str | None, mode: str, command: str, config: dict, results: dict,
                 **sections: Any) -> dict:
    doc = {"bench": mode, "command": command, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "commit": commit(), "machine": machine(), "config": config, "results": results,
           **{name: value for name, value in sections.items() if value is not None}}
    text = json.dumps(doc, indent=2)
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
    return doc
