"""The processes of a pipeline split's stages 1..N-1 (runner/pipeline.py says what a stage does): started by
the engine's builder, each builds the same engine from the same config for its own layers, joins the
group and runs the plans stage 0 shares until it is told to stop or its parent is gone."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time

import torch.distributed as dist

from strata.runner.pipeline import free_port, join_group

logger = logging.getLogger(__name__)


def start_workers(config, world: int) -> tuple[list[subprocess.Popen], int, str]:
    """Stages 1..world-1 as processes of their own (`python -m strata.engine.pipeline_workers`: each builds the
    engine's model and runner from `config`, then runs the plans stage 0 shares; a subprocess, not a
    multiprocessing child, since the server's engine process is a daemon, which may not have those)
    -> (processes, the group's port, the file passing them `config`, which stage 0 removes once the group
    is complete: every stage has read it by then)."""
    port = free_port()
    with tempfile.NamedTemporaryFile("wb", suffix=".pickle", delete=False) as f:
        pickle.dump(config, f)
    workers = [subprocess.Popen([sys.executable, "-m", "strata.engine.pipeline_workers", f.name, str(rank), str(world),
                                 str(port)]) for rank in range(1, world)]
    return workers, port, f.name


def _worker_main(config_path: str, rank: int, world: int, port: int) -> None:
    from strata.engine.build import build_engine  # (build imports this module)

    with open(config_path, "rb") as f:
        config = pickle.load(f)
    parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    join_group(rank, world, port, config.runner.device)
    status = 1
    try:
        parts = build_engine(config, quiet=True, stage_rank=rank)
        parts.runner.follow()
        if parts.loaded.experts is not None:  # its layers' rows of the routing profile (stage 0 saves its own)
            parts.loaded.experts.close()
        status = 0
    except Exception:  # stage 0 sees its peer gone at its next collective
        if os.getppid() != parent:  # the engine's process ended without closing the split: nothing failed here
            status = 0
        else:
            logger.exception("pipeline stage %d failed", rank)
    finally:
        dist.destroy_process_group()
        # straight out: the process group's threads may otherwise abort the interpreter's own teardown
        # ("terminate called without an active exception", seen 1 run in 8)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _exit_with_parent(parent: int) -> None:
    """A stage whose engine process is gone (killed, crashed) ends too instead of waiting in a collective."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


if __name__ == "__main__":
    _worker_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
