"""For the tests whose reference (HF transformers) opens the bundled GGUF through gguf-py: gguf-py's reader
with strata's one-pass array reading (strata.weights.gguf_file.read_array_parts) swapped in while the
reference loads. tests/weights/test_gguf_metadata_arrays.py checks against the unchanged gguf-py that both
give every field the same parts, so the reference reads the same vocabulary, config and tensors, without
the minutes gguf-py's element-by-element reading of a 49k-token vocabulary takes on a busy 2-core machine."""

from __future__ import annotations

import contextlib

from gguf import GGUFReader

from strata.weights.gguf_file import read_array_parts


@contextlib.contextmanager
def fast_gguf_arrays():
    original = GGUFReader._get_field_parts

    def get_field_parts(self, orig_offs: int, raw_type: int):
        return read_array_parts(self, orig_offs, raw_type) or original(self, orig_offs, raw_type)

    GGUFReader._get_field_parts = get_field_parts
    try:
        yield
    finally:
        GGUFReader._get_field_parts = original
