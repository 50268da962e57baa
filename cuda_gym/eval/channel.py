"""The worker's side of the pipe: every message leaves through `protocol.encode`, signed with the
job's key once the job has given one (sandbox.sign), so the evaluator can tell the worker's
messages from anything candidate code writes to the pipe."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import protocol, sandbox


class Channel:
    def __init__(self, conn: Any):
        self._conn = conn
        self._key: bytes | None = None
        self._seq = 0

    def authenticate(self, key_hex: str | None) -> None:
        """Sign every later message with the job's key (see sandbox.sign)."""
        self._key = bytes.fromhex(key_hex) if key_hex else None

    def send(self, kind: str, meta: dict | None = None, arrays: list[np.ndarray] = ()) -> None:
        if self._key is not None and kind != "exit":
            meta = sandbox.sign(self._key, self._seq, kind, meta or {}, list(arrays))
            self._seq += 1
        self._conn.send_bytes(protocol.encode(kind, meta, list(arrays)))


def send_error(channel: Channel, code: str, message: str, **meta: Any) -> None:
    channel.send("error", {"code": code, "message": message, **meta})
