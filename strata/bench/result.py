"""The one JSON result schema every `strata bench` mode writes: what ran, where, on which commit."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from typing import Any


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
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(__file__)).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_result(path: str | None, mode: str, command: str, config: dict, results: dict) -> dict:
    doc = {"bench": mode, "command": command, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "commit": commit(), "machine": machine(), "config": config, "results": results}
    text = json.dumps(doc, indent=2)
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
    return doc
