"""The layout's import rules, checked on the source (every import, also inside functions).

- the engine is a pure, deterministic core (no I/O, clocks, randomness, threads or Ray): it
  imports only a short allow-list of the standard library (``ENGINE_STDLIB``), ``raydex.codecs``
  and ``mypy_extensions`` (the ``i64`` annotations of ``engine.rules.product``: native ints
  compiled, plain ints interpreted);
- the actors never import the loadtest or benchmark applications;
- nobody imports another package's private ``_module`` (``raydex.<pkg>._x`` only from inside
  ``raydex.<pkg>``); packages talk through public names;
- the folders form no cycle: an import from folder A to folder B (any module of B, or B's
  ``__init__``) is an edge A -> B, and the graph of those edges is acyclic. So the data flow reads
  one way: ``engine -> codecs``, ``actors/<role> -> actors/runtime, actors/transport``,
  ``cluster/control -> actors``, ``observability/loadtest -> actors, cluster``.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["package-dir"]


def _modules() -> Iterator[tuple[str, bool, Path]]:
    """(module name, is a package __init__, path) of every raydex source file."""
    for pkg, folder in PACKAGE_DIR.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            is_init = rel[-1] == "__init__"
            parts = rel[:-1] if is_init else rel
            yield ".".join((pkg, *parts)), is_init, path


def _imports(module: str, is_init: bool, path: Path) -> Iterator[str]:
    """Absolute names of everything ``path`` imports (``from X import y`` yields ``X.y`` too,
    so importing a submodule by ``from pkg import mod`` counts as importing ``pkg.mod``)."""
    package = module if is_init else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{a.name}" for a in node.names)


def _folder(module: str, packages: set[str]) -> str:
    """The package (folder) a module lives in: itself if it is a package."""
    while module not in packages:
        module = module.rpartition(".")[0]
    return module


MODULES = list(_modules())
PACKAGES = {m for m, is_init, _ in MODULES if is_init}
NAMES = {m for m, _, _ in MODULES}


#: The standard library the engine may use: data structures, typing and hashing. Nothing that
#: reads a clock, the environment, the network or a random source (time, os, socket, random,
#: asyncio, threading, logging, ...), so the same commands always give the same state.
ENGINE_STDLIB = {
    "__future__",
    "collections",
    "dataclasses",
    "hashlib",
    "heapq",
    "operator",
    "typing",
}


def test_the_engine_imports_only_its_stdlib_allow_list_codecs_and_native_types() -> None:
    engine = [m for m in MODULES if m[0].startswith("raydex.engine")]
    assert len(engine) > 5
    bad = []
    for module, is_init, path in engine:
        for name in _imports(module, is_init, path):
            top = name.split(".")[0]
            if name.startswith(("raydex.engine", "raydex.codecs")) or top in ENGINE_STDLIB:
                continue
            if name == "raydex":  # ``from raydex import codecs``: the child name is checked
                continue
            if name in ("mypy_extensions", "mypy_extensions.i64"):
                continue
            # the byte buffer the events are written into (``_deltas``); not librt's clock or
            # random number modules
            if name == "librt.strings" or name.startswith("librt.strings."):
                continue
            bad.append(f"{module} imports {name}")
    assert not bad, bad


def test_actors_never_import_the_loadtest_or_the_benchmarks() -> None:
    apps = ("raydex.observability.loadtest", "raydex.observability.bench")
    bad = [
        f"{module} imports {name}"
        for module, is_init, path in MODULES
        if module.startswith("raydex.actors")
        for name in _imports(module, is_init, path)
        if name.startswith(apps)
    ]
    assert not bad, bad


def test_no_private_module_is_imported_from_outside_its_package() -> None:
    bad = []
    for module, is_init, path in [*MODULES, *_test_modules()]:
        for name in _imports(module, is_init, path):
            parts = name.split(".")
            for i, part in enumerate(parts):
                private = part.startswith("_") and not part.startswith("__")
                if private and ".".join(parts[: i + 1]) in NAMES:  # a module, not a name
                    owner = ".".join(parts[:i])
                    if owner != module and not module.startswith(owner + "."):
                        bad.append(f"{module} imports {name}")
                    break
    assert not bad, bad


def _test_modules() -> Iterator[tuple[str, bool, Path]]:
    for path in sorted((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(rel), path.name == "__init__.py", path


def test_the_folders_form_no_cycle() -> None:
    edges: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module, is_init, path in MODULES:
        src = _folder(module, PACKAGES)
        for name in _imports(module, is_init, path):
            if not name.startswith("raydex."):
                continue
            while name not in NAMES and "." in name:
                name = name.rpartition(".")[0]  # ``from pkg import Class`` -> pkg
            if name not in NAMES:
                continue
            dst = _folder(name, PACKAGES)
            if dst != src:
                edges[src].add(dst)
    cycle = _find_cycle(edges)
    assert cycle is None, " -> ".join(cycle or [])


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)) is not None:
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def test_the_boundary_checks_see_the_whole_package() -> None:
    # guards the checks above against passing vacuously (a wrong root or package map)
    assert {"raydex.engine", "raydex.actors.sequencer", "raydex.cluster.control"} <= PACKAGES
    assert len(MODULES) > 60
    assert _find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
