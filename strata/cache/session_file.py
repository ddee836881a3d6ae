"""Session files: named tensors (a conversation's token ids, KV blocks, recurrent-state checkpoint) and
a JSON header, in the safetensors layout, so any safetensors tool can open one. Written tensor by tensor
straight from their memory (no serialized copy of the file, as safetensors' own writer makes; no
pickle, which loading a torch.save file runs), renamed into place only once complete; read one tensor at
a time through safetensors' mmap, which checks the layout. Knows nothing of the engine: the caller
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
                torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3"}  # F8_E4M3: fp8 KV
_DTYPES = {name: dtype for dtype, name in _DTYPE_NAMES.items()}


class SessionFileError(ValueError):
    """The file is not a readable session file (truncated, another format, a damaged header)."""


def write(path: str, header: dict, tensors: dict[str, torch.Tensor]) -> int:
    """Write host `tensors` and `header` to `path` atomically -> bytes written."""
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
                if tensor.numel():  # straight from the tensor's memory: no serialized copy
                    f.write(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return 8 + len(head) + offset


class SessionReader:
    """An open session file: its header and tensor layout at once, each tensor read when asked for.
    The file stays mapped, so a later save under the same name (a rename) does not change what it reads."""

    def __init__(self, path: str) -> None:
        from safetensors import SafetensorError, safe_open

        try:
            self._file = safe_open(path, framework="pt")
            self.header = json.loads((self._file.metadata() or {})[HEADER_KEY])
            self.layout = {name: (_DTYPES.get(self._file.get_slice(name).get_dtype()),
                                  list(self._file.get_slice(name).get_shape())) for name in self._file.keys()}
        except (SafetensorError, KeyError, json.JSONDecodeError) as e:
            raise SessionFileError(f"{os.path.basename(path)} is not a readable Strata session file: "
                                   f"{type(e).__name__}: {e}") from e

    def tensor(self, name: str) -> torch.Tensor:
        return self._file.get_tensor(name)
