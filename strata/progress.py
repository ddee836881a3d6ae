"""Progress on stderr for a person watching (rich, transient): a bar for counted work (weights loading,
quantizing, CUDA graph capture) and a spinner for a step of unknown length (a GGUF file's metadata and
vocabulary parse). Both are no-ops when stderr is not a terminal or the caller is quiet."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


def watching(quiet: bool = False) -> bool:
    return not quiet and sys.stderr.isatty()


@contextlib.contextmanager
def bar(label: str, total: int, quiet: bool = False) -> Iterator[Callable[[], None]]:
    """Yields `advance()`; draws `label` and a bar of `total` steps while the block runs."""
    if not watching(quiet):
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)


@contextlib.contextmanager
def status(label: str, quiet: bool = False) -> Iterator[None]:
    """A spinner with `label` while the block runs."""
    if not watching(quiet):
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(label):
        yield
