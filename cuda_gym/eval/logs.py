"""Compiler logs cut down to what a reader (a person or a policy) needs: the first error lines."""
from __future__ import annotations

import re

_PATH = re.compile(r"(?:/[^\s:'\"()<>]+)+/([^/\s:'\"()<>]+)")
_ERROR_LINE = re.compile(r"(\berror\b|\bError\b|undefined reference|undefined symbol|ptxas fatal|cannot find -l)")
_NOISE = re.compile(
    r"^\s*(\[\d+/\d+\]|FAILED:|ninja: |c\+\+ |g\+\+ |gcc |clang\+\+ |/usr/\S*(c\+\+|g\+\+|nvcc)|\S*nvcc |"
    r"subprocess\.CalledProcessError|The above exception|Traceback|RuntimeError: Error building extension)"
)
_CONTEXT_STOP = re.compile(r"(: warning|: note|\bwarning\b|In function|In member function|^\s*$|^\S+\.\w+:\d+)")


def shorten_paths(text: str) -> str:
    """Build-cache paths are noise to the agent: keep only the file name."""
    return _PATH.sub(r"\1", text)


def trim_compile_log(log: str, max_errors: int = 6, context_lines: int = 3, max_chars: int = 3000) -> str:
    """The first compiler error lines (with the few lines that follow each: source line and caret),
    not the whole log. Falls back to the log's last lines when no error line is recognized."""
    lines = [shorten_paths(line.rstrip()) for line in log.splitlines()]
    picked: list[str] = []
    errors = 0
    index = 0
    while index < len(lines) and errors < max_errors:
        line = lines[index]
        if _ERROR_LINE.search(line) and not _NOISE.match(line):
            if index > 0 and re.search(r"In (member )?function|In instantiation", lines[index - 1]) and (
                    not picked or picked[-1] != lines[index - 1]):
                picked.append(lines[index - 1])
            picked.append(line)
            errors += 1
            follow = index + 1
            while follow < len(lines) and follow <= index + context_lines:
                nxt = lines[follow]
                if _ERROR_LINE.search(nxt) or _CONTEXT_STOP.search(nxt) or _NOISE.match(nxt):
                    break
                picked.append(nxt)
                follow += 1
            index = follow
            continue
        index += 1
    if not picked:
        meaningful = [line for line in lines if line.strip() and not _NOISE.match(line)]
        picked = meaningful[-15:]
    else:
        total = sum(1 for line in lines if _ERROR_LINE.search(line) and not _NOISE.match(line))
        if total > errors:
            picked.append(f"[... {total - errors} more error line(s) not shown ...]")
    text = "\n".join(picked)
    return text if len(text) <= max_chars else text[:max_chars] + "\n[...]"
