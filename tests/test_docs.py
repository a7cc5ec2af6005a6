"""The docs stay honest: every setting and hook is documented, and the plugin guide's tutorial runs."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hindsight_recall import hookspecs
from hindsight_recall.settings import Settings

DOCS = Path(__file__).resolve().parents[1] / "docs"


def documented_variables(text: str) -> set[str]:
    """Every ``HINDSIGHT_API_*`` name the text spells out, with families like `` `X_LOW` / `_MID` `` expanded."""
    names = set(re.findall(r"HINDSIGHT_API_[A-Z0-9_]*[A-Z0-9]", text))
    for first, rest in re.findall(r"`(HINDSIGHT_API_[A-Z0-9_]+)`((?:\s*/\s*`_[A-Z0-9]+`)+)", text):
        stem = first.rpartition("_")[0]
        names.update(stem + suffix for suffix in re.findall(r"`(_[A-Z0-9]+)`", rest))
    return names


def test_every_setting_is_documented() -> None:
    documented = documented_variables((DOCS / "configuration.md").read_text())
    assert [f"HINDSIGHT_API_{n.upper()}" for n in Settings.model_fields
            if f"HINDSIGHT_API_{n.upper()}" not in documented] == []


def test_a_setting_is_documented_by_its_name_not_by_a_common_suffix() -> None:
    family = "| `HINDSIGHT_API_RECALL_BUDGET_FIXED_LOW` / `_MID` / `_HIGH` (bank) | 100 |"
    assert documented_variables(family) == {f"HINDSIGHT_API_RECALL_BUDGET_FIXED_{x}" for x in ("LOW", "MID", "HIGH")}
    assert documented_variables("`HINDSIGHT_API_DB_COMMAND_TIMEOUT` and any `_TIMEOUT`") == {
        "HINDSIGHT_API_DB_COMMAND_TIMEOUT"}
    assert "HINDSIGHT_API_RECALL_TIMEOUT" not in documented_variables("| `HINDSIGHT_API_DB_TIMEOUT` / `_SIZE` |")


def test_every_hook_is_documented_with_its_signature() -> None:
    text = (DOCS / "hooks.md").read_text()
    for name, _ in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("register_"):
            assert f"## {name}" in text and f"{name}(register)" in text


# ---- the plugin guide's tutorial runs as written -------------------------------------------------

FENCE = re.compile(r"^```\w+ file=(?P<path>\S+)\n(?P<body>.*?)^```$", re.M | re.S)


def guide_files() -> dict[str, str]:
    """The files the plugin guide's tutorial creates: fenced blocks tagged ``file=<path>``."""
    return {m["path"]: m["body"] for m in FENCE.finditer((DOCS / "plugins.md").read_text())}


def install_like_pip(project: Path, site: Path) -> None:
    """Put a tutorial project on ``site`` as ``pip install`` would: its module and a dist-info with its entry points.

    :param project: a folder with ``pyproject.toml`` and the module it names.
    :param site: a directory that goes on ``PYTHONPATH``.
    """
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    for module in tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]["py-modules"]:
        shutil.copy(project / f"{module}.py", site / f"{module}.py")
    info = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    lines = [f"[{group}]", *(f"{k} = {v}" for k, v in points.items())] if (
        points := meta["entry-points"].get(group := "hindsight_recall")) else []
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def run_python(args: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_")}
    env.update(PYTHONPATH=str(site), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tutorial's folders written out, and a site directory where both plugins are "installed"."""
    root = tmp_path_factory.mktemp("tutorial")
    for path, body in guide_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(body)
    site = root / "site"
    site.mkdir()
    for project in ("hindsight-recall-simplewords", "hindsight-recall-reranker-overlap"):
        install_like_pip(root / project, site)
    return root, site


def test_guide_names_every_tutorial_file() -> None:
    assert set(guide_files()) == {
        "hindsight-recall-simplewords/pyproject.toml",
        "hindsight-recall-simplewords/hindsight_recall_simplewords.py",
        "hindsight-recall-simplewords/tests/test_suite.py",
        "hindsight-recall-reranker-overlap/pyproject.toml",
        "hindsight-recall-reranker-overlap/hindsight_recall_reranker_overlap.py",
        "hindsight-recall-reranker-overlap/tests/test_overlap.py",
        "hindsight-recall-reranker-overlap/tests/test_suite.py",
        "inprocess/run.py",
    }


def test_tutorial_plugins_pass_their_tests(tutorial: tuple[Path, Path]) -> None:
    """Both tutorial projects' tests, as ``pytest`` runs them after ``pip install -e``, in one process."""
    import hindsight_recall.testing as kit

    root, site = tutorial
    # Its own --basetemp: the numbered pytest-of-<user> folders are pruned by any other pytest run.
    args = ["-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-rs", "--import-mode=importlib",
            f"--basetemp={root / 'pytest-tmp'}",
            "hindsight-recall-simplewords/tests", "hindsight-recall-reranker-overlap/tests"]
    if not hasattr(kit, "RerankerSuite"):  # the reranker suite ships with a later core
        args.append("--ignore=hindsight-recall-reranker-overlap/tests/test_suite.py")
    result = run_python(args, root, site)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = int(re.search(r"\b(\d+) passed\b", result.stdout)[1])  # type: ignore[index]
    # the backend suite has about twenty tests; the reranker's own file three
    assert passed >= 20, result.stdout[-2000:]


def test_in_process_registration_example_runs(tutorial: tuple[Path, Path]) -> None:
    root, site = tutorial
    result = run_python([str(root / "inprocess" / "run.py")], root, root / "empty")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "simplewords found: code" in result.stdout


# ---- every distribution can be published -----------------------------------------------------------

ROOT = DOCS.parent
DISTRIBUTIONS = sorted(p.parent for p in ROOT.glob("*/pyproject.toml")) + sorted(
    p.parent for p in ROOT.glob("*/*/pyproject.toml") if p.parent.parent.name in {"backends", "rerankers"})


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_distribution_metadata_is_publishable(folder: Path) -> None:
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    core = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]
    assert project["name"].startswith("hindsight-recall")
    assert project["version"] == core["version"], "every distribution is released with the same version"
    assert project["description"] and project["license"] == "Apache-2.0" and project["requires-python"]
    readme = project["readme"]
    assert (folder / readme).is_file() if isinstance(readme, str) else readme["text"].startswith("# ")
    assert any(c.startswith("Development Status") for c in project["classifiers"])
    if folder.name != "core":
        pin = next(d for d in project["dependencies"] if d.startswith("hindsight-recall"))
        assert f">={core['version']}" in pin and "<" in pin, "plugins bound the core version they were built for"
        assert list(project["entry-points"]["hindsight_recall"]) == [folder.name], "one entry point named as its folder"


def test_changelog_has_the_current_version() -> None:
    version = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]["version"]
    assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.parametrize("module", ["local", "tei", "cohere", "jina"])
def test_every_reranker_setting_is_documented(module: str) -> None:
    from pydantic_settings import BaseSettings

    plugin = pytest.importorskip(f"hindsight_recall_reranker_{module}")
    text = (DOCS / "rerankers.md").read_text()
    classes = [c for c in vars(plugin).values()
               if isinstance(c, type) and issubclass(c, BaseSettings) and c is not BaseSettings]
    assert classes
    for cls in classes:
        prefix = cls.model_config["env_prefix"]
        missing = [f"{prefix}{name.upper()}" for name in cls.model_fields if f"{prefix}{name.upper()}" not in text]
        assert not missing


def test_architecture_names_every_part_of_the_core_package() -> None:
    import hindsight_recall

    text = (DOCS / "architecture.md").read_text()
    package = Path(hindsight_recall.__file__).parent
    parts = [p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    parts += [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    assert [p for p in parts if p not in text] == []


def test_readme_library_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"^```python\n(.*?)^```$", readme, re.M | re.S)
    assert example is not None
    script = tmp_path / "example.py"
    script.write_text(example[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HINDSIGHT_API_RERANKER_PROVIDER="rrf",
               HINDSIGHT_API_EMBEDDED_DATA_DIR=str(tmp_path / "data"))
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("job ") and "Alice works at Helios Robotics." in result.stdout


def documented_members(protocol: str) -> tuple[set[str], set[str]]:
    """The required and optional members docs/plugins.md lists in the tables under ``### <protocol>``."""
    text = (DOCS / "plugins.md").read_text()
    section = text.split(f"\n### {protocol}\n", 1)[1].split("\n### ", 1)[0]
    required: set[str] = set()
    optional: set[str] = set()
    target = required
    for line in section.splitlines():
        if line.startswith("| member") or line.startswith("| optional member"):
            target = optional if line.startswith("| optional member") else required
        elif line.startswith("| `"):
            cell = line.split("`")[1]
            target.add(re.match(r"(?:async )?(\w+)", cell).group(1))  # type: ignore[union-attr]
    return required, optional


@pytest.mark.parametrize("name", ["TextSearchBackend", "Reranker", "Retriever", "BudgetFunction", "EmbeddingProvider"])
def test_the_plugin_reference_lists_each_protocol_member(name: str) -> None:
    """docs/plugins.md names every member of each protocol, marked optional exactly when it has a default."""
    from hindsight_recall import protocols

    protocol = getattr(protocols, name)
    optional = set(protocols.optional_members(protocol))
    required = set(protocols.members(protocol)) - optional
    assert documented_members(name) == (required, optional)


def test_the_reranker_protocol_describes_the_normalisation_core_applies() -> None:
    """The protocol's docstring and the plugin guide say sigmoid, because normalise is one."""
    import math

    from hindsight_recall.protocols import Reranker
    from hindsight_recall.recall.scoring import normalise

    assert normalise([0.0, 4.0]) == pytest.approx([0.5, 1 / (1 + math.exp(-4))])  # not min-max's [0, 1]
    assert normalise([0.2, 0.9]) == [0.2, 0.9]  # a batch inside [0, 1] is kept
    for text in (Reranker.score.__doc__ or "", (DOCS / "plugins.md").read_text().split("### Reranker", 1)[1]):
        assert "sigmoid" in text and "min-max normalis" not in text
