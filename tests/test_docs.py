"""The docs stay honest: every setting and hook is documented."""

from __future__ import annotations

import inspect
from pathlib import Path

from hindsight_recall import hookspecs
from hindsight_recall.settings import Settings

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_setting_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = []
    for name in Settings.model_fields:
        variable = f"HINDSIGHT_API_{name.upper()}"
        stem, _, last = variable.rpartition("_")
        if variable not in text and f"{stem}_{last}" not in text and f"_{last}`" not in text:
            missing.append(variable)
    assert not missing


def test_every_hook_is_documented_with_its_signature() -> None:
    text = (DOCS / "hooks.md").read_text()
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("register_"):
            assert f"## {name}" in text and f"{name}(register)" in text
