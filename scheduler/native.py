"""Compiled copies of a few pure hot-path modules (mypyc) and a few C modules; the Python stays the truth.

A module listed in :data:`NATIVE` is self-contained (stdlib imports only) and fully typed, so
mypyc compiles it unchanged. ``make install`` runs ``python -m scheduler.native build``, which
compiles each one into ``_<name>_native`` next to it and stamps the build with the source's
SHA-256. Callers take the module through :func:`load`, which returns the compiled copy only when
its stamp matches the source as it is now: an edited source is never shadowed by a stale build,
and a machine without a compiler (or without mypyc: it ships with the ``dev`` extra's mypy) runs
the same code interpreted. ``KSCHED_NATIVE=0`` forces the interpreted modules (to compare them).

A module listed in :data:`NATIVE_C` is a C source (``<name>.c``) that serves a function whose
Python copy stays the source of truth and the fallback: what hashlib-style C calls cost from Python
when mypyc could not remove them. ``build`` compiles it with ``$CC``, else the C compiler Python
was built with (``sysconfig``'s ``CC``), stamped the same way; :func:`load_c` returns it only when
current, else None, and the caller keeps its Python copy. Each is tested equal to that copy.

``python -m scheduler.native check`` fails unless every listed module's compiled copy is current;
the test suite runs it, so CI measures what production runs.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

log = logging.getLogger("ksched.native")

# Each entry was proven hot by a profile; the ratio it bought is in docs/decisions.md.
NATIVE: tuple[str, ...] = (
    "scheduler.records.avro_fast", "scheduler.processor.intake", "scheduler.processor.recent",
)
# C modules, by import name (the source is the same path with ``.c``); each proven hot the same way.
NATIVE_C: tuple[str, ...] = ("scheduler.domain._ids_native",)


def load(name: str) -> ModuleType:
    """The compiled copy of module ``name`` when it is current, else ``name`` itself."""
    pure = importlib.import_module(name)
    native = _current(name, _native_name(name))
    return pure if native is None else native


def load_c(name: str) -> ModuleType | None:
    """C module ``name`` (listed in :data:`NATIVE_C`) when it is built from its current source, else
    None: the caller then runs its Python copy."""
    return _current(name, name)


def _current(name: str, module: str) -> ModuleType | None:
    """``module``, the build of ``name``, when it is current and loads; else None (logged why)."""
    if os.environ.get("KSCHED_NATIVE", "1") == "0":
        return None
    state = _state(name)
    if state != "current":
        log.log(logging.WARNING if state == "stale" else logging.INFO,
                "%s runs interpreted: its compiled copy is %s; run make install", name, state)
        return None
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # built for another interpreter, or a library it needs is gone
        log.warning("%s runs interpreted: its compiled copy does not load (%s); run make install", name, exc)
        return None


def status() -> dict[str, str]:
    """Per listed module (mypyc and C): ``current``, ``stale`` or ``missing``."""
    return {name: _state(name) for name in (*NATIVE, *NATIVE_C)}


def _state(name: str) -> str:
    """``missing`` unless the build for this interpreter (its ``EXT_SUFFIX``) and its stamp exist;
    then ``current`` when the stamp is the source's hash, else ``stale``."""
    stamp = _stamp_path(name)
    if not stamp.exists() or not _built_path(name).exists():
        return "missing"
    return "current" if stamp.read_text().strip() == _source_hash(name) else "stale"


def build(force: bool = False) -> None:
    """Compile every listed module whose copy is not current (``force``: all of them)."""
    for name, state in status().items():
        if state == "current" and not force:
            continue
        (_compile_c if name in NATIVE_C else _compile)(name)
        print(f"native: compiled {name}")


def _compile_c(name: str) -> None:
    """Build C module ``name`` with ``$CC``, else the compiler Python was built with (Linux's
    ``-shared``; elsewhere the Python copy runs)."""
    digest = _source_hash(name)  # of the source compiled: one saved meanwhile makes the build stale
    src = _source_path(name)
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    with tempfile.TemporaryDirectory(prefix="ksched-native-") as tmp:
        built = Path(tmp) / _built_path(name).name
        cmd = [*cc, "-O3", "-fPIC", "-shared", "-Wall", "-I", sysconfig.get_paths()["include"], str(src),
               "-o", str(built)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise SystemExit(f"native: cannot run the C compiler {cc[0]!r} ({exc}): install one (Debian: "
                             "apt-get install gcc) or name it in CC") from None
        if done.returncode != 0:
            raise SystemExit(f"native: the C compiler failed on {name} ({shlex.join(cmd)}):\n"
                             f"{done.stdout}\n{done.stderr}")
        _install(built, src.parent)
    _stamp_path(name).write_text(digest + "\n")


def _compile(name: str) -> None:
    digest = _source_hash(name)
    src = _source_path(name)
    package = name.rsplit(".", 1)[0].split(".")
    with tempfile.TemporaryDirectory(prefix="ksched-native-") as tmp:
        # mypyc names the extension after its path, so the copy sits in the same package layout.
        d = Path(tmp)
        for i in range(len(package)):
            (d.joinpath(*package[: i + 1])).mkdir(exist_ok=True)
            (d.joinpath(*package[: i + 1]) / "__init__.py").touch()
        rel = Path(*package) / f"{_leaf(name)}.py"
        shutil.copyfile(src, d / rel)
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", str(rel)], cwd=d, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"native: mypyc failed on {name}:\n{done.stdout}\n{done.stderr}")
        for so in d.joinpath(*package).glob(f"{_leaf(name)}*.so"):
            _install(so, src.parent)
    _stamp_path(name).write_text(digest + "\n")


def _install(built: Path, folder: Path) -> None:
    """Put ``built`` in ``folder`` by a rename: a process importing it meanwhile (or running it)
    keeps the old file or takes the new one, never half of one."""
    tmp = folder / f".{built.name}.tmp"
    shutil.copyfile(built, tmp)
    os.replace(tmp, folder / built.name)


def _built_path(name: str) -> Path:
    return _source_path(name).parent / f"{_leaf(name)}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def _native_name(name: str) -> str:
    return f"{name.rsplit('.', 1)[0]}.{_leaf(name)}"


def _leaf(name: str) -> str:
    """The compiled file's name: a C module's own, a mypyc copy's ``_<module>_native``."""
    leaf = name.rsplit(".", 1)[1]
    return leaf if name in NATIVE_C else f"_{leaf}_native"


def _source_path(name: str) -> Path:
    root = Path(__file__).resolve().parent.parent
    return root.joinpath(*name.split(".")).with_suffix(".c" if name in NATIVE_C else ".py")


def _stamp_path(name: str) -> Path:
    return _source_path(name).parent / f"{_leaf(name)}.sha256"


def _source_hash(name: str) -> str:
    return hashlib.sha256(_source_path(name).read_bytes()).hexdigest()


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "build":
        build(force="--force" in argv)
        return 0
    if cmd == "check":
        bad = {n: s for n, s in status().items() if s != "current"}
        for n, s in bad.items():
            print(f"native: {n}: compiled copy {s}; run `make install` (python -m scheduler.native build)")
        return 1 if bad else 0
    print("usage: python -m scheduler.native build [--force] | check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
