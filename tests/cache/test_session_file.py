"""Session files: what is written reads back bit for bit (every dtype the caches use, empty tensors), a
write never leaves a partial file under the name, and files that are not session files are refused."""

from __future__ import annotations

import os

import pytest
import torch

from strata.cache import session_file


def test_a_file_reads_back_as_written(tmp_path):
    path = str(tmp_path / "s")
    tensors = {"token_ids": torch.arange(8), "kv.0.0": torch.randn(2, 4, 2, 3, dtype=torch.bfloat16),
               "kv.1.0": torch.randn(2, 4, 1, 5).to(torch.float16), "kv.1.1": torch.zeros(2, 4, 1, 0),
               "state.0.1": torch.randn(1, 3, 4, 4)}
    size = session_file.write(path, {"format": "x", "n": [1, 2]}, tensors)
    assert size == os.path.getsize(path) and os.listdir(tmp_path) == ["s"]
    reader = session_file.SessionReader(path)
    assert reader.header == {"format": "x", "n": [1, 2]}
    assert reader.layout == {name: (t.dtype, list(t.shape)) for name, t in tensors.items()}
    for name, tensor in tensors.items():
        assert torch.equal(reader.tensor(name), tensor)


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(tmp_path, monkeypatch):
    path = str(tmp_path / "s")
    session_file.write(path, {}, {"a": torch.ones(3)})

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)  # the data is written, the rename into place fails
    with pytest.raises(OSError, match="No space"):
        session_file.write(path, {}, {"a": torch.zeros(3)})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["s"] and torch.equal(session_file.SessionReader(path).tensor("a"), torch.ones(3))


@pytest.mark.parametrize("content", [b"", b"not a session file at all", None])
def test_other_files_are_refused(tmp_path, content):
    path = str(tmp_path / "s")
    if content is None:  # a valid safetensors file without our header
        from safetensors.torch import save_file

        save_file({"a": torch.ones(2)}, path)
    else:
        (tmp_path / "s").write_bytes(content)
    with pytest.raises(session_file.SessionFileError, match="not a readable Strata session file"):
        session_file.SessionReader(path)
