"""The engine is a pure, deterministic core: no I/O, clocks, randomness, threads or Ray."""

from __future__ import annotations

import ast
from pathlib import Path

import raydex.engine

FORBIDDEN = {
    "ray",
    "asyncio",
    "time",
    "socket",
    "logging",
    "threading",
    "random",
    "multiprocessing",
    "concurrent",
    "datetime",
    "os",
    "subprocess",
    "selectors",
    "secrets",
    "uuid",
}
ENGINE_DIR = Path(raydex.engine.__file__).parent


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_engine_module_imports_io_clocks_randomness_or_ray() -> None:
    modules = sorted(ENGINE_DIR.glob("*.py"))
    assert modules
    offenders = {
        p.name: sorted(_imported_roots(p) & FORBIDDEN)
        for p in modules
        if _imported_roots(p) & FORBIDDEN
    }
    assert offenders == {}


def test_engine_modules_import_only_the_stdlib_allow_list_and_raydex_codecs() -> None:
    # mypy_extensions: the i64 annotations of rules.product (plain ints when interpreted)
    allowed = {
        "__future__",
        "collections",
        "typing",
        "hashlib",
        "heapq",
        "raydex",
        "dataclasses",
        "mypy_extensions",
        "operator",
    }
    for p in sorted(ENGINE_DIR.glob("*.py")):
        extra = _imported_roots(p) - allowed
        assert not extra, f"{p.name} imports {sorted(extra)}"
