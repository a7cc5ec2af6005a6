"""The service and the commands run on uvloop's loop where it is installed, else on asyncio's."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from hindsight_recall.cli_engine import run
from hindsight_recall.event_loop import loop_factory, new_runner


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_commands_run_on_uvloop_when_it_is_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert loop_factory() is uvloop.new_event_loop
    assert run(_loop_module).startswith("uvloop")


def test_without_uvloop_the_loop_is_asyncios(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on Windows, where it is not installed
    assert loop_factory() is None
    with new_runner() as runner:
        assert runner.run(_loop_module()).startswith("asyncio")
