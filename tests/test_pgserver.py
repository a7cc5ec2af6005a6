"""hindsight_recall.testing.pgserver without building anything: sources, checksums, tools, build steps, the CLI.

The builds themselves and the servers they start run in the tests(<extension>) sessions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from hindsight_recall.testing import pgserver
from hindsight_recall.testing.http_server import FixtureServer, Reply, Request
from hindsight_recall.testing.pgserver import Builder, BuildError, Source, Unavailable


def tarball(path: Path, *members: str) -> bytes:
    """A gzipped tarball with one small file per member path; written to ``path`` and returned."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in members:
            info = tarfile.TarInfo(name)
            info.size = 2
            archive.addfile(info, io.BytesIO(b"x\n"))
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory under tmp_path with a ``shared/vendor`` two levels up, and a private cache."""
    work = tmp_path / "clone" / "sub"
    work.mkdir(parents=True)
    (tmp_path / "shared" / "vendor").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setattr(pgserver, "cache_root", lambda: tmp_path / "cache")
    return tmp_path


def test_shared_folder_is_found_in_a_parent(in_tmp: Path) -> None:
    assert pgserver.shared_folder("vendor") == in_tmp / "shared" / "vendor"
    # a folder that only exists further up is not this tree's: anything found lies outside tmp_path
    beyond = pgserver.shared_folder("bench", "locomo", "dev")
    assert beyond is None or in_tmp not in beyond.parents
    (in_tmp / "clone" / "shared" / "vendor").mkdir(parents=True)
    # the nearest wins
    assert pgserver.shared_folder("vendor") == in_tmp / "clone" / "shared" / "vendor"


def test_vendored_tarball_is_used_when_its_checksum_matches(in_tmp: Path) -> None:
    data = tarball(in_tmp / "shared" / "vendor" / "x-1.0.tar.gz", "x-1.0/README")
    source = Source("x-1.0.tar.gz", "http://127.0.0.1:9/never", hashlib.sha256(data).hexdigest())
    assert pgserver.fetch(source, in_tmp / "downloads", print) == in_tmp / "shared" / "vendor" / "x-1.0.tar.gz"


def test_vendored_tarball_with_another_checksum_is_refused(in_tmp: Path) -> None:
    tarball(in_tmp / "shared" / "vendor" / "x-1.0.tar.gz", "x-1.0/README")
    with pytest.raises(Unavailable, match="does not have the sha256 0{64}"):
        pgserver.fetch(Source("x-1.0.tar.gz", "http://127.0.0.1:9/never", "0" * 64), in_tmp / "downloads", print)


def test_missing_tarball_is_downloaded_once_and_checked(in_tmp: Path) -> None:
    data = tarball(in_tmp / "upstream.tar.gz", "y-2.0/README")
    with FixtureServer({("GET", "/y.tar.gz"): lambda request: Reply(raw=data)}) as server:
        source = Source("y-2.0.tar.gz", f"{server.url}/y.tar.gz", hashlib.sha256(data).hexdigest())
        first = pgserver.fetch(source, in_tmp / "downloads", print)
        again = pgserver.fetch(source, in_tmp / "downloads", print)
        assert first == again == in_tmp / "downloads" / "y-2.0.tar.gz"
        assert first.read_bytes() == data
        assert len(server.requests_to("GET", "/y.tar.gz")) == 1


def test_downloaded_tarball_with_another_checksum_is_refused_and_not_kept(in_tmp: Path) -> None:
    data = tarball(in_tmp / "upstream.tar.gz", "y-2.0/README")

    def reply(request: Request) -> Reply:
        return Reply(raw=data)

    with FixtureServer({("GET", "/y.tar.gz"): reply}) as server:
        source = Source("y-2.0.tar.gz", f"{server.url}/y.tar.gz", "f" * 64)
        with pytest.raises(Unavailable, match="does not have the sha256"):
            pgserver.fetch(source, in_tmp / "downloads", print)
    assert list((in_tmp / "downloads").iterdir()) == []


def test_unreachable_download_says_why_in_one_line(in_tmp: Path) -> None:
    source = Source("z-3.0.tar.gz", f"http://127.0.0.1:{pgserver.free_port()}/z.tar.gz", "0" * 64)
    with pytest.raises(Unavailable) as caught:
        pgserver.fetch(source, in_tmp / "downloads", print)
    assert "z-3.0.tar.gz is not in shared/vendor/ and could not be downloaded" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_tarball_needs_one_top_folder(tmp_path: Path) -> None:
    tarball(tmp_path / "ok.tar.gz", "top/a", "top/sub/b")
    assert pgserver._unpack(tmp_path / "ok.tar.gz", tmp_path / "ok") == tmp_path / "ok" / "top"
    tarball(tmp_path / "two.tar.gz", "one/a", "two/b")
    with pytest.raises(BuildError, match="2 top folders"):
        pgserver._unpack(tmp_path / "two.tar.gz", tmp_path / "two")


def test_missing_tools_name_the_packages() -> None:
    recipe = dataclasses.replace(pgserver.RECIPES["citus"], programs=("no-such-compiler-xyz",))
    with pytest.raises(Unavailable, match=r"needs no-such-compiler-xyz \(apt-get install .*liblz4-dev"):
        pgserver._check_tools(recipe)
    recipe = dataclasses.replace(pgserver.RECIPES["citus"], programs=(), pkg_config=("no-such-library-xyz",))
    if pgserver.shutil.which("pkg-config"):
        with pytest.raises(Unavailable, match="needs no-such-library-xyz"):
            pgserver._check_tools(recipe)


def test_build_steps_log_their_output_and_a_failure_shows_its_end(tmp_path: Path) -> None:
    lines: list[str] = []
    builder = Builder(tmp_path / "build.log", lines.append, "demo-1.0")
    builder.run("sh", "-c", "echo configured", cwd=tmp_path)
    assert "configured" in (tmp_path / "build.log").read_text()
    with pytest.raises(BuildError) as caught:
        builder.run("sh", "-c", "echo 'error: missing header foo.h'; exit 4", cwd=tmp_path)
    assert "exit 4" in str(caught.value) and "missing header foo.h" in str(caught.value)
    assert lines[0] == "demo-1.0: sh -c 'echo configured'"


def test_progress_lines_while_a_step_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgserver, "PROGRESS_EVERY", 0.2)
    lines: list[str] = []
    Builder(tmp_path / "build.log", lines.append, "slow-1.0").run(
        "sh", "-c", "echo '[1/3] compiling a.c'; sleep 1", cwd=tmp_path)
    assert any(line.startswith("slow-1.0: 0 s, [1/3] compiling a.c") for line in lines[1:]), lines


def test_the_unknown_compiler_flag_is_stripped(tmp_path: Path) -> None:
    makefile = tmp_path / "Makefile.global"
    makefile.write_text("CFLAGS = -O2 -Wall -Wmissing-variable-declarations -fPIC\n")
    pgserver.strip_unknown_flag(makefile)
    assert makefile.read_text() == "CFLAGS = -O2 -Wall -fPIC\n"


def test_unknown_extension_is_unavailable() -> None:
    known = "citus, pg_search, pg_textsearch, pgroonga, vchord"
    with pytest.raises(Unavailable, match=f"no build recipe for 'zombodb'.*{known}"):
        pgserver.install("zombodb")


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert pgserver.main(["build", "zombodb"]) == 3
    assert capsys.readouterr().out == "zombodb cannot be built here: no build recipe for 'zombodb' " \
                                      "(known: citus, pg_search, pg_textsearch, pgroonga, vchord)\n"
    assert pgserver.main(["frobnicate"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_cache_key_names_extension_and_versions() -> None:
    assert [r.key for r in pgserver.RECIPES.values()] == [
        "pg_textsearch-1.4.0", "pgroonga-4.0.6", "vchord_bm25-0.3.0", "pg_search-0.21.16", "citus-14.0.1"]
    assert pgserver.RECIPES["pgroonga"].needs == ("groonga",)
    assert pgserver.RECIPES["pg_search"].needs == ("cargo-pgrx",)
    assert {n: r.preload for n, r in pgserver.RECIPES.items() if r.preload} == {
        "pg_textsearch": ("pg_textsearch",), "vchord": ("vchord_bm25", "pg_tokenizer"), "citus": ("citus",)}
    assert pgserver.RECIPES["vchord"].extensions == ("pg_tokenizer",)
    _, version = pgserver.embedded_install()
    assert version.startswith("18.")


def test_a_second_builder_waits_for_the_lock(tmp_path: Path) -> None:
    import fcntl
    import threading

    lines: list[str] = []
    entered = threading.Event()

    def second() -> None:
        with pgserver._locked(tmp_path / "x.lock", lines.append):
            entered.set()

    with (tmp_path / "x.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        thread = threading.Thread(target=second)
        thread.start()
        assert not entered.wait(0.5)
        fcntl.flock(held, fcntl.LOCK_UN)
    assert entered.wait(10)
    thread.join()
    assert lines == ["waiting for another process building x ..."]


def test_the_build_cache_can_be_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pgserver.CACHE_ENV, str(tmp_path / "cold"))
    assert pgserver.cache_root() == tmp_path / "cold"
    monkeypatch.setenv(pgserver.CACHE_ENV, "  ")
    assert pgserver.cache_root() != tmp_path / "cold"


def test_git_dependencies_point_at_the_vendored_folders(tmp_path: Path) -> None:
    repo = tmp_path / "tantivy"
    (repo / "tokenizer-api").mkdir(parents=True)
    (repo / "Cargo.toml").write_text('[package]\nname = "tantivy"\n')
    (repo / "tokenizer-api" / "Cargo.toml").write_text('[package]\nname = "tantivy-tokenizer-api"\n')
    manifest = tmp_path / "Cargo.toml"
    manifest.write_text(
        'tantivy = { git = "https://example.org/tantivy.git", package = "tantivy", rev = "55e26b2", features = [\n'
        '  "stemmer",\n], default-features = false }\n'
        '[patch.crates-io]\n'
        'tantivy-tokenizer-api = { git = "https://example.org/tantivy.git", package = "tantivy-tokenizer-api", '
        'rev = "55e26b2" }\n'
        'fst = { git = "https://example.org/fst.git" }\n')
    pgserver._git_to_path(manifest, "https://example.org/tantivy.git", repo)
    assert manifest.read_text() == (
        f'tantivy = {{ path = "{repo}", package = "tantivy", features = [\n  "stemmer",\n], '
        'default-features = false }\n'
        '[patch.crates-io]\n'
        f'tantivy-tokenizer-api = {{ path = "{repo / "tokenizer-api"}", package = "tantivy-tokenizer-api" }}\n'
        'fst = { git = "https://example.org/fst.git" }\n')
    with pytest.raises(BuildError, match="no dependency on https://example.org/other.git"):
        pgserver._git_to_path(manifest, "https://example.org/other.git", repo)


def test_a_patch_that_finds_nothing_fails_the_build(tmp_path: Path) -> None:
    source = tmp_path / "builtin.rs"
    source.write_text('pub const PRELOAD_MODELS: &[&str] = &["llmlingua2"];\n')
    pgserver._patch(source, '&["llmlingua2"]', "&[]")
    assert source.read_text() == "pub const PRELOAD_MODELS: &[&str] = &[];\n"
    with pytest.raises(BuildError, match="expected text not found"):
        pgserver._patch(source, '&["llmlingua2"]', "&[]")


def test_the_kept_lock_file_is_shipped() -> None:
    lock = pgserver.LOCKS / "vchord_bm25-0.3.0.Cargo.lock"
    assert 'name = "pgrx"\nversion = "0.16.1"' in lock.read_text()
