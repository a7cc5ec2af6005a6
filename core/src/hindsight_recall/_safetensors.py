"""Read and write safetensors files with numpy alone (no torch).

The format is an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range, then the raw little-endian data.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

#: safetensors dtypes numpy reads as they are (BF16 is widened to float32 by hand)
DTYPES: dict[str, str] = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
                          "I8": "i1", "U8": "u1", "BOOL": "?"}
NAMES = {np.dtype(code): name for name, code in DTYPES.items()}


def read(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every tensor in the file at ``path``, by name (BF16 as float32).

    :raises ValueError: the file is not a safetensors file or holds a dtype numpy cannot read.
    """
    data = Path(path).read_bytes()
    size = int.from_bytes(data[:8], "little")
    if len(data) < 8 + size:
        raise ValueError(f"{path}: not a safetensors file (header past the end)")
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    base = 8 + size
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        start, end = (base + offset for offset in info["data_offsets"])
        shape = tuple(info["shape"])
        if info["dtype"] == "BF16":  # the high half of a float32
            raw = np.frombuffer(data, dtype="<u2", count=(end - start) // 2, offset=start)
            tensors[name] = (raw.astype("<u4") << 16).view("<f4").reshape(shape)
        elif info["dtype"] in DTYPES:
            dtype = np.dtype(DTYPES[info["dtype"]])
            tensors[name] = np.frombuffer(data, dtype=dtype, count=(end - start) // dtype.itemsize,
                                          offset=start).reshape(shape)
        else:
            raise ValueError(f"{path}: tensor {name!r} has dtype {info['dtype']}, which is not read here")
    return tensors


def write(path: str | os.PathLike[str], tensors: Mapping[str, np.ndarray]) -> None:
    """Write ``tensors`` to ``path`` in the safetensors format (what ``read`` and transformers load)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()  # little-endian: the machines this runs on are
        header[name] = {"dtype": NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned, as the reference writer keeps it
    Path(path).write_bytes(len(encoded).to_bytes(8, "little") + encoded + b"".join(blobs))
