"""The test kit's server fixtures: the ``hindsight_live`` marker, and what a suite does without a server."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hindsight_recall.testing import plugin
from hindsight_recall.testing.plugin import ExtensionServers

TESTS = '''
import pytest

def test_uses_the_loop(hr_run):
    pass

def test_needs_a_schema(hr_fresh_schema):
    pass

@pytest.mark.hindsight_live
def test_marked_by_hand():
    pass

def test_golden_sql():
    pass

class TestSuite:
    backend_name = "pg_textsearch"

    def test_engine(self, hr_engine):
        pass
'''


def collect(tmp_path: Path, *args: str) -> list[str]:
    (tmp_path / "test_demo.py").write_text(TESTS)
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *args, str(tmp_path / "test_demo.py")], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    return [line.split("::", 1)[1] for line in result.stdout.splitlines() if "::" in line]


def test_tests_using_server_fixtures_are_marked_live(tmp_path: Path) -> None:
    live = ["test_uses_the_loop", "test_needs_a_schema", "test_marked_by_hand", "TestSuite::test_engine"]
    # test_golden_sql is left out: "-m 'not hindsight_live'" keeps only it
    assert collect(tmp_path, "-m", "hindsight_live") == live


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> ExtensionServers:
    for name in ("HINDSIGHT_TEST_DATABASE_URL_PGROONGA", "HINDSIGHT_TEST_DATABASE_URL_VCHORD", plugin.SERVERS_ENV,
                 plugin.REQUIRED_ENV):
        monkeypatch.delenv(name, raising=False)
    return ExtensionServers(contextlib.nullcontext)


def test_a_url_wins(servers: ExtensionServers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_TEST_DATABASE_URL_PGROONGA", " postgresql://u:p@127.0.0.1:1/db ")
    monkeypatch.setenv(plugin.SERVERS_ENV, "pgroonga")
    assert servers.url("pgroonga") == "postgresql://u:p@127.0.0.1:1/db"


def test_without_url_the_skip_names_both_variables(servers: ExtensionServers) -> None:
    with pytest.raises(pytest.skip.Exception) as caught:
        servers.url("pgroonga")
    assert "set HINDSIGHT_TEST_DATABASE_URL_PGROONGA to its URL" in str(caught.value)
    assert "or HINDSIGHT_TEST_EXTENSION_SERVERS=pgroonga to build and start one" in str(caught.value)


def test_a_backend_without_recipe_names_only_its_url(
    servers: ExtensionServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(plugin.SERVERS_ENV, "all")
    with pytest.raises(pytest.skip.Exception) as caught:
        servers.url("zombodb")
    assert "HINDSIGHT_TEST_DATABASE_URL_ZOMBODB" in str(caught.value)
    assert plugin.SERVERS_ENV not in str(caught.value)


def test_an_unbuildable_server_skips_with_the_reason_or_fails_when_required(
    servers: ExtensionServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(name: str) -> None:
        raise plugin.pgserver.Unavailable("pgroonga-4.0.6.tar.gz is not in shared/vendor/")

    monkeypatch.setattr(plugin.pgserver, "install", unavailable)
    monkeypatch.setenv(plugin.SERVERS_ENV, "pg_textsearch, pgroonga")
    with pytest.raises(pytest.skip.Exception, match="no pgroonga server: pgroonga-4.0.6.tar.gz is not in"):
        servers.url("pgroonga")
    monkeypatch.setenv(plugin.REQUIRED_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="HINDSIGHT_TEST_EXTENSION_SERVERS_REQUIRED is set"):
        servers.url("pgroonga")
    assert os.environ[plugin.SERVERS_ENV]


def test_a_failed_build_is_not_retried_in_the_session(
    servers: ExtensionServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def broken(name: str) -> None:
        calls.append(name)
        raise plugin.pgserver.BuildError("pgroonga-4.0.6: ninja failed (exit 1)")

    monkeypatch.setattr(plugin.pgserver, "install", broken)
    monkeypatch.setenv(plugin.SERVERS_ENV, "pgroonga")
    with pytest.raises(plugin.pgserver.BuildError):
        servers.url("pgroonga")
    with pytest.raises(pytest.fail.Exception, match="the build failed earlier in this session: pgroonga-4.0.6: ninja"):
        servers.url("pgroonga")
    assert calls == ["pgroonga"]
