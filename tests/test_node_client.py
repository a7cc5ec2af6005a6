"""The service driven by upstream's published npm client, ``@vectorize-io/hindsight-client``, under node.

``tests/node`` pins the client in its package-lock.json; this module installs it there with ``npm ci``
when it is missing (the npm registry must be reachable then), starts a real service and runs
``node --test`` against it. Node 20 or later and npm are required: without them the test fails and says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hindsight_recall.testing.service import ServerThread

NODE_DIR = Path(__file__).parent / "node"
PACKAGE = "@vectorize-io/hindsight-client"


def tool(name: str) -> str:
    """The path of ``name`` on PATH, or a failure that says node and npm are needed."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not on PATH: the npm client tests need node 20+ and npm")
    return found


def locked_version(directory: Path) -> str:
    lock = json.loads((directory / "package-lock.json").read_text())
    return str(lock["packages"][f"node_modules/{PACKAGE}"]["version"])


def installed_version(directory: Path) -> str | None:
    manifest = directory / "node_modules" / PACKAGE / "package.json"
    return str(json.loads(manifest.read_text())["version"]) if manifest.exists() else None


def install_client(directory: Path, *npm_args: str) -> None:
    """``npm ci`` in ``directory`` unless the locked client is already installed; a clear failure if npm cannot."""
    if installed_version(directory) == locked_version(directory):
        return
    done = subprocess.run([tool("npm"), "ci", "--no-audit", "--no-fund", *npm_args], cwd=directory,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or installed_version(directory) != locked_version(directory):
        pytest.fail(f"npm could not install {PACKAGE} {locked_version(directory)} in {directory} (the npm registry "
                    f"must be reachable the first time):\n{done.stderr[-2000:]}")


def run_node_tests(directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("node"), "--test"], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=600)


def counts(output: str) -> dict[str, int]:
    """node's closing summary (``# pass 9`` and so on) as numbers."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$",
                                                              output, flags=re.M)}


@pytest.fixture(scope="module")
def service_url(serve: Callable[..., ServerThread]) -> str:
    return serve(own_database=True).url


@pytest.fixture(scope="module")
def node_client() -> Path:
    node = subprocess.run([tool("node"), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(node.lstrip("v").split(".")[0]) < 20:
        pytest.fail(f"node {node} is too old: the npm client tests need node 20+")
    install_client(NODE_DIR)
    return NODE_DIR


def test_the_npm_client_drives_the_main_operations(node_client: Path, service_url: str) -> None:
    done = run_node_tests(node_client, {**os.environ, "HINDSIGHT_API_URL": service_url})
    summary = counts(done.stdout)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert summary["fail"] == 0 and summary["cancelled"] == 0 and summary["skipped"] == 0, summary
    assert summary["pass"] == summary["tests"] >= 9, summary


def test_the_node_tests_refuse_to_run_without_a_server_url(node_client: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_API_URL"}
    done = run_node_tests(node_client, env)
    assert done.returncode != 0
    assert "HINDSIGHT_API_URL must name a running server" in done.stdout + done.stderr


def test_an_install_that_npm_cannot_do_fails_with_a_clear_message(tmp_path: Path) -> None:
    # offline with an empty cache: npm ci cannot fetch the package and must say so at once
    for name in ("package.json", "package-lock.json"):
        shutil.copy(NODE_DIR / name, tmp_path / name)
    with pytest.raises(pytest.fail.Exception, match=r"npm could not install @vectorize-io/hindsight-client \d"):
        install_client(tmp_path, "--offline", f"--cache={tmp_path / 'empty-cache'}")
    assert installed_version(tmp_path) is None


def test_an_installed_client_of_the_locked_version_is_not_installed_again(node_client: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # npm is never called when the locked version is in place: a broken npm on PATH does not matter then
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "npm").write_text("#!/bin/sh\nexit 1\n")
    (fake / "npm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    install_client(node_client)
    assert installed_version(node_client) == locked_version(node_client)
