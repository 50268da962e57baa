"""Messages from a worker to the evaluator: a JSON header plus raw array bytes. Never pickle.

The worker runs candidate code, so what it sends is untrusted: the evaluator parses it with
`json` and `numpy.frombuffer` only, bounds its size, and validates its fields.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from json import encoder as _json_encoder
from typing import Any

import numpy as np

_HEADER = struct.Struct("<Q")
# The worker encodes its messages in a process where candidate code runs, and json's Python layer
# reads what that code can rebind at call time (json.dumps reads json._default_encoder, and
# JSONEncoder.iterencode json.encoder.c_make_encoder): a candidate rebinding them rewrote a
# message's timing before it was signed. So messages are encoded by the C encoder taken here, at
# import (before any candidate code), which formats floats and ints in C.
_c_make_encoder = _json_encoder.c_make_encoder
_c_encode_string = _json_encoder.c_encode_basestring_ascii
if _c_make_encoder is None or _c_encode_string is None:  # a Python without the _json accelerator
    raise ImportError("cuda_gym needs CPython's C json encoder (the _json module)")
_ALLOWED_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool", "complex64"}


class ProtocolError(RuntimeError):
    """A worker sent something that is not a well-formed message."""


@dataclass
class Message:
    kind: str
    meta: dict[str, Any] = field(default_factory=dict)
    arrays: list[np.ndarray] = field(default_factory=list)


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _dumps(value: Any) -> str:
    """json.dumps(value, allow_nan=True), through the C encoder taken at import."""
    encode = _c_make_encoder({}, _not_serializable, _c_encode_string, None, ": ", ", ", False, False, True)
    return "".join(encode(value, 0))


def encode(kind: str, meta: dict[str, Any] | None = None, arrays: list[np.ndarray] = ()) -> bytes:
    arrays = [np.ascontiguousarray(a) for a in arrays]
    header = _dumps({
        "kind": kind,
        "meta": meta or {},
        "arrays": [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays],
    }).encode()
    return b"".join([_HEADER.pack(len(header)), header, *(a.tobytes() for a in arrays)])


def decode(payload: bytes) -> Message:
    if len(payload) < _HEADER.size:
        raise ProtocolError("truncated message")
    (header_len,) = _HEADER.unpack_from(payload)
    end = _HEADER.size + header_len
    if end > len(payload):
        raise ProtocolError("header longer than message")
    try:
        header = json.loads(payload[_HEADER.size:end])
        kind = str(header["kind"])
        meta = header["meta"]
        specs = header["arrays"]
        if not isinstance(meta, dict) or not isinstance(specs, list):
            raise TypeError("bad field types")
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"malformed header: {exc}") from None
    arrays = []
    offset = end
    for spec in specs:
        dtype_name = spec.get("dtype") if isinstance(spec, dict) else None
        if dtype_name not in _ALLOWED_DTYPES:
            raise ProtocolError(f"array dtype {dtype_name!r} not allowed")
        shape = spec.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ProtocolError("bad array shape")
        dtype = np.dtype(dtype_name)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset + nbytes > len(payload):
            raise ProtocolError("array data shorter than declared")
        arrays.append(np.frombuffer(payload, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape))
        offset += nbytes
    if offset != len(payload):
        raise ProtocolError("trailing bytes after arrays")
    return Message(kind, meta, arrays)
