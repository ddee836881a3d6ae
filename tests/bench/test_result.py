"""Bench result files name the commit they measured: the checkout's HEAD, or $STRATA_COMMIT where the tree
is a copy whose git metadata may be stale (the GPU machine)."""

from __future__ import annotations

import json
import subprocess

from strata.bench.result import commit, write_result


def test_the_commit_is_the_checkouts_head_unless_strata_commit_names_it(monkeypatch, tmp_path):
    monkeypatch.delenv("STRATA_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert commit() == (head or "unknown")
    monkeypatch.setenv("STRATA_COMMIT", "abc1234")
    path = tmp_path / "r.json"
    write_result(str(path), "offline", "strata bench offline x", {}, {})
    assert commit() == "abc1234" and json.loads(path.read_text())["commit"] == "abc1234"
