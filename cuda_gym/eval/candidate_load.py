"""Executing the candidate's module in this process: the build job (the module executed with CUDA
hidden, which compiles its native code into the build cache) and the eval job's load."""
from __future__ import annotations

import linecache
import os
import sys
import time
import traceback
import types

from . import fastbuild
from .channel import Channel, send_error
from .failures import classify_load_error

_perf_counter = time.perf_counter


def load_candidate(source: str) -> types.ModuleType:
    module = types.ModuleType("candidate")
    module.__file__ = os.path.join(os.getcwd(), "candidate.py")
    sys.modules["candidate"] = module
    # The source where inspect.getsource finds it (@triton.jit reads its kernel's source).
    linecache.cache["candidate.py"] = (len(source), None, source.splitlines(keepends=True), "candidate.py")
    exec(compile(source, "candidate.py", "exec"), module.__dict__)
    return module


def run_build(channel: Channel, job: dict) -> None:
    started = _perf_counter()
    fastbuild.install()
    try:
        load_candidate(job["candidate_source"])
    except BaseException as exc:  # noqa: BLE001 - every failure is reported as a verdict
        send_error(channel, classify_load_error(exc), f"{type(exc).__name__}: {exc}",
                   traceback=traceback.format_exc(limit=8))
        return
    channel.send("built", {"seconds": _perf_counter() - started, "inline_build_forms": fastbuild.BUILD_FORMS})

