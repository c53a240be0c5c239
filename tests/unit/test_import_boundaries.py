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
  ``cluster/control -> actors``, ``observability/loadtest -> actors, cluster``;
- nor do the modules inside one folder: no module imports itself back through its siblings
  (``TYPE_CHECKING`` and in-function imports count: they hide a circle, they do not remove it);
- the folders stand in layers (``LAYERS``), and a module imports only from its own layer and the
  ones below: codecs < engine < the leaf modules at the top of ``observability/`` (instruments)
  and ``cluster/`` (pinning, huge pages, topology, an actor's bundle) < actors <
  ``cluster/control`` < ``observability/loadtest`` and ``observability/bench`` < ``cluster/cli``
  (the ``raydex`` command, which starts every application).

An import names the module it loads: ``import a.b`` -> ``a.b``; ``from a import b`` -> ``a.b`` when
that is a module (a source file or a C extension that ``setup.py`` builds), else ``a``.
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


def _extensions() -> set[str]:
    """Module names of the C extensions ``setup.py`` declares (``Extension("raydex....", ...)``)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Extension"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


MODULES = list(_modules())
PACKAGES = {m for m, is_init, _ in MODULES if is_init}
NAMES = {m for m, _, _ in MODULES}
EXTENSIONS = _extensions()


def _loaded(module: str, is_init: bool, path: Path) -> Iterator[tuple[str, int]]:
    """(raydex module, line) of every import in ``path``, each named by the module it loads
    (the module docstring's rule); imports of anything outside raydex are left out."""
    known = NAMES | EXTENSIONS
    package = module if is_init else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
            names = [n if n in known else target for n in names]
        else:
            continue
        for name in names:
            while name not in known and "." in name:
                name = name.rpartition(".")[0]
            if name in known:
                yield name, node.lineno


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
        for name, _ in _loaded(module, is_init, path):
            dst = _folder(name, PACKAGES)
            if dst != src:
                edges[src].add(dst)
    cycle = _find_cycle(edges)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_modules_inside_a_folder_form_no_circle() -> None:
    edges: dict[str, set[str]] = {m: set() for m in NAMES | EXTENSIONS}
    for module, is_init, path in MODULES:
        folder = _folder(module, PACKAGES)
        edges[module] |= {
            name
            for name, _ in _loaded(module, is_init, path)
            if name != module and _folder(name, PACKAGES) == folder
        }
    circles = [_described(circle, edges) for circle in _circles(edges)]
    assert not circles, "modules that import each other in a circle:\n" + "\n".join(circles)


def _described(circle: list[str], edges: dict[str, set[str]]) -> str:
    """``folder: its members (e.g. one loop through them)``."""
    loop = _find_cycle({m: edges[m] & set(circle) for m in circle}) or []
    short = [m.rpartition(".")[2] for m in circle]
    return (
        f"{_folder(circle[0], PACKAGES)}: {', '.join(short)} "
        f"(e.g. {' -> '.join(m.rpartition('.')[2] for m in loop)})"
    )


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every set of two or more nodes that reach each other (Tarjan's strongly connected
    components), each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            members = stack[stack.index(n) :]
            del stack[stack.index(n) :]
            if len(members) > 1:
                found.append(sorted(members))

    for n in sorted(edges):
        if n not in index:
            visit(n)
    return sorted(found)


#: The layers, lowest first: a module may import its own layer and the ones below. A module is in
#: the layer of the longest prefix that names it (``raydex.cluster.control`` before
#: ``raydex.cluster``).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("codecs", ("raydex.codecs",)),
    ("engine", ("raydex.engine",)),
    # leaf modules actors use: metrics, histograms, GC stats, flight recorder, tracing; thread
    # pinning, huge pages, topology, the bundle an actor is given
    ("instruments", ("raydex.observability", "raydex.cluster")),
    ("actors", ("raydex.actors",)),
    ("cluster control", ("raydex.cluster.control",)),
    ("applications", ("raydex.observability.loadtest", "raydex.observability.bench")),
    ("cli", ("raydex.cluster.cli",)),
)


def _layer(module: str) -> int:
    """Index in ``LAYERS`` of the layer ``module`` is in."""
    best, length = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = i, len(prefix)
    assert best >= 0, f"{module} is in no layer"
    return best


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    bad = []
    for module, is_init, path in MODULES:
        mine = _layer(module)
        for name, line in _loaded(module, is_init, path):
            theirs = _layer(name)
            if theirs > mine:
                rel = path.relative_to(ROOT)
                bad.append(
                    f"{rel}:{line}: {module} imports {name} "
                    f"({LAYERS[mine][0]} below {LAYERS[theirs][0]})"
                )
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


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
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]
    assert {"raydex.codecs._blockdec", "raydex.actors.replica.cache._cacheloop"} <= EXTENSIONS
    # every module has a layer, and the layers fall where the docstring says
    assert all(_layer(m) >= 0 for m in NAMES | EXTENSIONS)
    order = ["raydex.codecs", "raydex.engine", "raydex.cluster.pinning", "raydex.actors.replica"]
    order += ["raydex.cluster.control.deploy", "raydex.observability.loadtest.run"]
    order += ["raydex.cluster.cli.commands"]
    assert [_layer(m) for m in order] == sorted(_layer(m) for m in order)
    assert _layer("raydex.observability.metrics") == _layer("raydex.cluster.bundle")
