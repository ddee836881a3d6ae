"""CheckedReader reads metadata arrays in one pass (strata/weights/gguf_file.py): every field it gives has
gguf-py's own parts, data indices, types and contents, for arrays of strings and of every number type, empty
arrays and a nested array, in little- and big-endian files (gguf-py's own parse of the bundled model's
vocabulary would take ~10 s of the suite; its strings and numbers go through the same two paths)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFEndian, GGUFReader, GGUFValueType, GGUFWriter

from strata.weights.gguf_file import CheckedReader


def _assert_same_fields(path: str) -> None:
    ours, theirs = CheckedReader(path), GGUFReader(path)
    assert list(ours.fields) == list(theirs.fields)
    for name, expected in theirs.fields.items():
        field = ours.fields[name]
        assert (field.offset, field.data, field.types) == (expected.offset, expected.data, expected.types), name
        assert len(field.parts) == len(expected.parts), name
        for part, expected_part in zip(field.parts, expected.parts):
            assert part.dtype == expected_part.dtype and part.shape == expected_part.shape, name
            assert part.tobytes() == expected_part.tobytes(), name
        np.testing.assert_equal(field.contents(), expected.contents())
    assert [(t.name, t.data_offset) for t in ours.tensors] == [(t.name, t.data_offset) for t in theirs.tensors]


@pytest.mark.parametrize("endian", [GGUFEndian.LITTLE, GGUFEndian.BIG])
def test_arrays_read_in_one_pass_equal_gguf_py(tmp_path, endian):
    path = str(tmp_path / "arrays.gguf")
    writer = GGUFWriter(path, "llama", endianess=endian)
    writer.add_array("t.strings", ["a", "", "héllo wörld", "<|im_start|>", "x" * 300, "Ġthe"]
                     + [f"token{i}" for i in range(2000)])
    writer.add_array("t.empty", [])
    writer.add_array("t.nested", [[1, 2], [3]])
    writer.add_array("t.bools", [True, False, True])
    for value_type, values in [(GGUFValueType.UINT8, [0, 255]), (GGUFValueType.INT8, [-128, 127]),
                               (GGUFValueType.UINT16, [1, 65535]), (GGUFValueType.INT16, [-2, 3]),
                               (GGUFValueType.UINT32, [7, 2 ** 32 - 1]), (GGUFValueType.INT32, [-7, 1, 2, 3]),
                               (GGUFValueType.UINT64, [2 ** 63]), (GGUFValueType.INT64, [-(2 ** 62), 5]),
                               (GGUFValueType.FLOAT32, [0.5, -1e-6, 3.25]), (GGUFValueType.FLOAT64, [1 / 3])]:
        writer.add_key_value(f"t.{value_type.name.lower()}", values, GGUFValueType.ARRAY, sub_type=value_type)
    writer.add_string("t.scalar_string", "plain")
    writer.add_uint32("t.scalar", 42)
    writer.add_tensor("w", np.arange(32, dtype=np.float32).reshape(2, 16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _assert_same_fields(path)

