"""Session files: named tensors (a conversation's token ids, KV blocks, recurrent-state checkpoint) and
a JSON header, in the safetensors layout, so any safetensors tool can open one. Written one tensor at a
time straight from its memory (no serialized copy of the whole file), renamed into place only once
complete; read through safetensors, which checks the layout. Knows nothing of the engine: the caller
decides what the tensors and the header hold.
"""

from __future__ import annotations

import json
import os
import struct

import torch

HEADER_KEY = "strata_session"
_DTYPE_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
                torch.bool: "BOOL"}


class SessionFileError(ValueError):
    """The file is not a readable session file (truncated, another format, a damaged header)."""


def write(path: str, header: dict, tensors: dict[str, torch.Tensor]) -> int:
    """Write `tensors` (host tensors) and `header` to `path` atomically -> bytes written."""
    entries, offset = {}, 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        entries[name] = {"dtype": _DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                         "data_offsets": [offset, offset + size]}
        offset += size
    entries["__metadata__"] = {HEADER_KEY: json.dumps(header)}
    head = json.dumps(entries).encode()
    head += b" " * (-len(head) % 8)  # tensor data starts 8-byte aligned
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.tmp-{os.getpid()}")  # a leading dot: never a valid session name
    try:
        with open(temporary, "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for tensor in tensors.values():
                if tensor.numel():
                    f.write(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return 8 + len(head) + offset


def read_header(path: str) -> dict:
    """The header saved with the file (cheap: the tensors are not read)."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100 << 20:
                raise SessionFileError(f"{os.path.basename(path)} is not a session file (header of {length} bytes)")
            entries = json.loads(f.read(length))
        return json.loads(entries["__metadata__"][HEADER_KEY])
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise SessionFileError(f"{os.path.basename(path)} is not a Strata session file ({type(e).__name__})") from e


def read_tensors(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the file, in host memory."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            return {name: f.get_tensor(name) for name in f.keys()}
    except SafetensorError as e:
        raise SessionFileError(f"{os.path.basename(path)} is damaged: {e}") from e
