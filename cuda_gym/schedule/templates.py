"""Where the csrc/ kernel templates are, and their text with sibling includes inlined."""
from __future__ import annotations

import re
from pathlib import Path


TEMPLATE_DIR_ENV = "CUDA_GYM_CSRC"


class Unsupported(ValueError):
    """The task's reference uses something the templates do not cover (the message names it)."""


def template_dir() -> Path:
    """csrc/templates: $CUDA_GYM_CSRC/templates, the repository's csrc/ (source or editable install),
    or the copy installed as package data under cuda_gym/csrc."""
    import os

    candidates = []
    if os.environ.get(TEMPLATE_DIR_ENV):
        candidates.append(Path(os.environ[TEMPLATE_DIR_ENV]) / "templates")
    candidates.append(Path(__file__).resolve().parents[2] / "csrc" / "templates")
    candidates.append(Path(__file__).resolve().parents[1] / "csrc" / "templates")  # cuda_gym/csrc (package data)
    for path in candidates:
        if (path / "common.h").exists():
            return path
    raise FileNotFoundError(f"csrc/templates not found (looked in {', '.join(map(str, candidates))}); "
                            f"set ${TEMPLATE_DIR_ENV} to the csrc folder of a cuda_gym checkout")


def read_template(name: str) -> str:
    """A template file's text with its `#include "..."` of sibling templates removed (they are inlined)."""
    text = (template_dir() / name).read_text(encoding="utf-8")
    return re.sub(r'^\s*#include\s+"[^"]+"\s*$', "", text, flags=re.M).replace("#pragma once", "")
