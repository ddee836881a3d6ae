"""strata.progress draws on stderr only for a person watching (a terminal), never when quiet or piped."""

from __future__ import annotations

import io
import sys

from strata import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_and_status_draw_on_a_terminal_and_stay_silent_otherwise(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress.bar("capturing CUDA graphs", 3) as advance:
        for _ in range(3):
            advance()
    with progress.status("reading the metadata of model.gguf"):
        pass
    assert "capturing CUDA graphs" in terminal.getvalue()
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    with progress.bar("loading", 2) as advance:
        advance()
    with progress.status("reading"):
        pass
    with progress.bar("quiet", 2, quiet=True) as advance:
        advance()
    assert piped.getvalue() == ""
    monkeypatch.setattr(sys, "stderr", terminal)
    assert not progress.watching(quiet=True) and progress.watching()
