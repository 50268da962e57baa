"""The service's journal: one JSON line per submitted job and per verdict, appended and fsynced
before the service answers for it, so a restarted service still answers for every verdict it made
and knows which jobs it accepted but never judged (lost: their clients must submit them again).

Verdicts are not held in memory: the journal keeps each one's byte offset and reads it back when asked.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOURNAL_FILE = "journal.jsonl"


@dataclass
class JournalEntry:
    """What the journal knows about one job: who submitted it, and where its verdict line starts."""

    job_id: str
    client: str
    task_id: str
    submitted_at: float
    verdict_offset: int | None = None


class Journal:
    """Append-only JSONL at `directory/journal.jsonl`. Thread-safe."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / JOURNAL_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.entries: dict[str, JournalEntry] = {}
        self.torn_lines = 0  # lines a crash left half-written (skipped)
        self._replay()
        # Jobs accepted by an earlier run of the service and never judged: lost, not to be judged now.
        self.lost = {job_id for job_id, entry in self.entries.items() if entry.verdict_offset is None}
        self._file = open(self.path, "ab")
        if self._file.tell() and not self._ends_with_newline():
            self._file.write(b"\n")  # a torn last line stays one line of its own

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"

    def _replay(self) -> None:
        if not self.path.exists():
            return
        offset = 0
        with open(self.path, "rb") as handle:
            for line in handle:
                start, offset = offset, offset + len(line)
                try:
                    record = json.loads(line)
                    job_id = record["job_id"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.torn_lines += 1
                    continue
                if record.get("event") == "submitted":
                    self.entries[job_id] = JournalEntry(job_id, record.get("client", ""), record.get("task_id", ""),
                                                        record.get("time", 0.0))
                elif record.get("event") == "verdict" and job_id in self.entries:
                    self.entries[job_id].verdict_offset = start

    def _append(self, record: dict[str, Any]) -> int:
        """Write one line durably; returns its byte offset."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._lock:
            offset = self._file.tell()
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())
        return offset

    def submitted(self, job_id: str, client: str, task_id: str, candidate_hash: str) -> JournalEntry:
        now = time.time()
        self._append({"event": "submitted", "job_id": job_id, "client": client, "task_id": task_id,
                      "candidate_hash": candidate_hash, "time": now})
        entry = JournalEntry(job_id, client, task_id, now)
        with self._lock:
            self.entries[job_id] = entry
        return entry

    def verdict(self, job_id: str, result: dict[str, Any]) -> None:
        offset = self._append({"event": "verdict", "job_id": job_id, "time": time.time(), "result": result})
        with self._lock:
            self.entries[job_id].verdict_offset = offset

    def read_verdict(self, job_id: str) -> dict[str, Any] | None:
        """The journaled `EvalResult.to_dict()` of `job_id`, or None while it has none."""
        entry = self.entries.get(job_id)
        if entry is None or entry.verdict_offset is None:
            return None
        with open(self.path, "rb") as handle:
            handle.seek(entry.verdict_offset)
            return json.loads(handle.readline())["result"]

    def close(self) -> None:
        with self._lock:
            self._file.close()
