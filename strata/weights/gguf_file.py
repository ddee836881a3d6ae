"""Opening a GGUF model: one file, or every part of one split by llama.cpp's gguf-split
(`name-00001-of-00003.gguf`; part 1 holds the metadata, every part holds tensors).

Each part is checked before any tensor loads: every tensor's type is known, its rows are whole blocks and
its bytes lie inside its file. A problem is a ValueError naming the file, the tensor and what to do. Parts
are mapped copy-on-write, so tensors can be zero-copy, writable torch views of the file that never write it.
Metadata arrays (a vocabulary's tokens, merges, types and scores) are read in one pass each, with the
parts gguf-py would give them: its reader takes seconds per 100k strings.
"""

from __future__ import annotations

import math
import os
import re
import struct
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType

_SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class CheckedReader(GGUFReader):
    """gguf-py's reader, with each tensor's type, row length and extent checked before gguf-py reads it
    (where a bad one would fail as a bare reshape error, or not at all)."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(path, mode="c")

    def _build_tensors(self, start_offs: int, fields: list) -> None:
        for field in fields:
            # gguf-py's tensor-info layout: name length, name, number of dims, dims, type, offset
            _, name_bytes, _, dims, raw_type, offset = field.parts
            self._check_tensor(bytes(name_bytes).decode("utf-8", "replace"), [int(d) for d in dims],
                               int(raw_type[0]), start_offs + int(offset[0]))
        super()._build_tensors(start_offs, fields)

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list, list[int], list[GGUFValueType]]:
        return read_array_parts(self, orig_offs, raw_type) or super()._get_field_parts(orig_offs, raw_type)

    def _check_tensor(self, name: str, dims: list[int], raw_type: int, start: int) -> None:
        try:
            qtype = GGMLQuantizationType(raw_type)
            block_size, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise ValueError(f"{self.path}: tensor {name!r} has GGML type id {raw_type}, which the installed gguf "
                             f"package does not know; the file may come from a newer llama.cpp: upgrade gguf "
                             f"(pip install -U gguf)") from None
        if not dims or dims[0] % block_size:
            raise ValueError(f"{self.path}: tensor {name!r} ({qtype.name}, shape {dims}) has rows of "
                             f"{dims[0] if dims else 0} values, not a whole number of {qtype.name} blocks of "
                             f"{block_size}; the file is corrupt or its converter is broken: convert it again")
        end = start + math.prod(dims) // block_size * type_size
        if end > len(self.data):
            raise ValueError(f"{self.path} is truncated or corrupt: tensor {name!r} ends at byte {end:,} but "
                             f"the file has {len(self.data):,} bytes; download or convert it again")


def read_array_parts(reader: GGUFReader, orig_offs: int, raw_type: int) -> tuple | None:
    """gguf-py's (size, parts, data indices, types) of an array of strings or numbers, read in one pass; None
    for any other field. gguf-py reads arrays one element at a time through memmap slices (about 30 µs a
    string: seconds for a vocabulary); here each part is a plain view of the same bytes."""
    if raw_type != GGUFValueType.ARRAY:
        return None
    raw_itype, count = reader._get(orig_offs, np.uint32), reader._get(orig_offs + 4, np.uint64)
    item_type, n = GGUFValueType(int(raw_itype[0])), int(count[0])
    if item_type != GGUFValueType.STRING and item_type not in reader.gguf_scalar_to_np:
        return None  # nested arrays: rare and small
    types, offs = [GGUFValueType.ARRAY] + [item_type] * (n > 0), orig_offs + 12
    if item_type != GGUFValueType.STRING:
        values = reader._get(offs, reader.gguf_scalar_to_np[item_type], n).view(np.ndarray)
        return 12 + int(values.nbytes), [raw_itype, count, *values.reshape(n, 1)], list(range(2, 2 + n)), types
    plain = reader.data.view(np.ndarray)
    length_type = np.dtype(np.uint64).newbyteorder(reader.byte_order)
    length = struct.Struct(length_type.str[0] + "Q")  # '<' or '>': the file's byte order
    parts = [raw_itype, count]
    for _ in range(n):
        (size,) = length.unpack_from(plain, offs)
        parts += (plain[offs:offs + 8].view(length_type), plain[offs + 8:offs + 8 + size])
        offs += 8 + size
    return offs - orig_offs, parts, list(range(3, 3 + 2 * n, 2)), types


def open_parts(path: str) -> list[CheckedReader]:
    """The reader of every part of the GGUF model `path` (a single file, or any part of a split one)."""
    first = open_reader(path)
    count = _field(first, "split.count", 1)
    if count <= 1:
        return [first]
    m = _SPLIT_NAME.match(os.path.basename(path))
    if m is None or int(m.group("count")) != count:
        raise ValueError(f"{path} is one of {count} parts of a split GGUF, but its name does not say where the "
                         f"others are; keep gguf-split's names (<name>-00001-of-{count:05d}.gguf)")
    folder = os.path.dirname(path)
    paths = [os.path.join(folder, f"{m.group('stem')}-{no:05d}-of-{count:05d}.gguf") for no in range(1, count + 1)]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise ValueError(f"{path} is one of {count} parts of a split GGUF, but {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} missing; download every part into {folder or '.'}")
    readers = [first if os.path.samefile(p, path) else open_reader(p) for p in paths]
    for no, (p, reader) in enumerate(zip(paths, readers)):
        if _field(reader, "split.no", no) != no or _field(reader, "split.count", count) != count:
            raise ValueError(f"{p} says it is part {_field(reader, 'split.no', no) + 1} of "
                             f"{_field(reader, 'split.count', count)}, not part {no + 1} of {count}; the parts come "
                             f"from different splits: download them again")
    expected = _field(readers[0], "split.tensors.count", None)
    found = sum(len(r.tensors) for r in readers)
    if expected is not None and found != expected:
        raise ValueError(f"{path}: the {count} parts hold {found} tensors, but part 1 says {expected}; a part is "
                         f"corrupt or from another split: download them again")
    return readers


def open_reader(path: str) -> CheckedReader:
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); pass a .gguf "
                         f"file written by llama.cpp, or an HF model folder")
    try:
        return CheckedReader(path)
    except ValueError as e:
        if str(e).startswith(path):  # our own check: it names the tensor already
            raise
        raise ValueError(f"{path} is truncated or corrupt (ValueError: {e}); download or convert it again") from e
    except (IndexError, KeyError, OverflowError, OSError) as e:
        raise ValueError(f"{path} is truncated or corrupt ({type(e).__name__}: {e}); download or convert it "
                         f"again") from e


def _field(reader: GGUFReader, key: str, default: Any) -> Any:
    field = reader.fields.get(key)
    return default if field is None else int(field.contents())
