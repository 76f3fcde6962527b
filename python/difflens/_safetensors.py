"""A safetensors reader with numpy alone: the header checked before any tensor is touched.

The layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}), then the data.
Offsets count from the end of the header. Large files are mapped, not read.
"""

import json
import mmap
import os

import numpy as np

# The kinds DiffLens meets: its own bundles (F32), checkpoints (F32, F16, BF16), diff-mlx's training state
# (U64 "opt.step", I64, BOOL).
_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # widened to float32 below
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_MAX_HEADER = 100 << 20  # as the C++ reader: a header over 100 MB is no bundle's


class FormatError(ValueError):
    """A file that is not what it says: the message names the file and what is wrong."""


def _fail(source, what):
    raise FormatError(f"{source}: {what}")


def parse(buffer, source="<bytes>"):
    """Reads a safetensors file held in `buffer` (bytes, memoryview or mmap).

    Returns (tensors, metadata): a dict name -> numpy array (read-only views of the buffer; BF16 widened to
    float32 copies) and the "__metadata__" dict (empty when absent). Raises FormatError naming what is wrong.
    """
    view = memoryview(buffer)
    size = len(view)
    if size < 8:
        _fail(source, f"{size} bytes: too short for a safetensors header")
    n = int.from_bytes(view[:8], "little")
    if n > _MAX_HEADER or n > size - 8:
        _fail(source, f"the header claims {n} bytes; the file has {size - 8} after the length")
    try:
        header = json.loads(bytes(view[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        _fail(source, f"the header is not valid JSON ({e})")
    if not isinstance(header, dict):
        _fail(source, "the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        _fail(source, "__metadata__ is not an object of strings")
    data = view[8 + n :]
    tensors = {}
    for name, info in header.items():
        if not isinstance(info, dict):
            _fail(source, f"tensor {name!r}: its entry is not an object")
        dtype = info.get("dtype")
        if dtype not in _DTYPES:
            _fail(source, f"tensor {name!r}: unknown dtype {dtype!r}")
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            _fail(source, f"tensor {name!r}: the shape {shape!r} is not a list of sizes")
        offsets = info.get("data_offsets")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= len(data)
        ):
            _fail(source, f"tensor {name!r}: data_offsets {offsets!r} outside the {len(data)} data bytes")
        dt = _DTYPES[dtype]
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * dt.itemsize:
            _fail(
                source,
                f"tensor {name!r}: {offsets[1] - offsets[0]} bytes for shape {shape} of {dtype} "
                f"({count * dt.itemsize} expected)",
            )
        a = np.frombuffer(data, dtype=dt, count=count, offset=offsets[0]).reshape(shape)
        if dtype == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a
    return tensors, metadata


def read(path):
    """Reads a safetensors file from disk (mapped: a 1.6 GB bundle is not read into memory at once)."""
    path = os.fspath(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise FormatError(f"{path}: cannot open it ({e.strerror})") from None
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            _fail(path, "the file is empty")
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return parse(m, path)
