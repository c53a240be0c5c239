"""The documentation leads somewhere: every relative link and every repository path named in
README.md and docs/*.md exists (a link's ``#anchor`` too, when it has one), every repository path a
docstring or comment in the package folders names exists, nothing points at a file outside the
repository, and docs/operations.md explains every knob of the deploy spec.

A repository path is a word starting with a top-level folder (``actors/sequencer/wal.py``,
``engine/``, ``tests/faults/``); ``{a,b}`` expands to both names, and a ``*`` pattern needs only
the folder before it (``engine/*.so`` exists once compiled). Links are Markdown's
``[text](target)``; ``http(s)``/``mailto`` targets are left to their sites.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import itertools
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from raydex.actors.replica import ApiConfig, ReplicaConfig
from raydex.actors.sequencer import SequencerConfig
from raydex.actors.snapshot import SnapshotConfig
from raydex.cluster.control.spec import GcSpec, ReplicaGroupSpec, SequencerSpec

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "codecs", "cluster", "engine", "observability")
DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
#: files outside the repository that nothing in it may name (a clone does not have them)
OUTSIDE = re.compile(r"\b(?:WIRE|DESIGN|STYLE)\.md\b")

PATH = re.compile(
    r"(?<![\w./~<>$-])(?:actors|codecs|cluster|engine|observability|tests|docs)/[\w./{},*-]*"
)
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def expand(word: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py`` (every brace group, in order)."""
    parts = re.split(r"(\{[^{}]*\})", word)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def exists(path: str) -> bool:
    if "*" in path:
        path = path[: path.index("*")].rpartition("/")[0]
    return (REPO / path).exists()


def named_paths(text: str) -> Iterator[str]:
    for match in PATH.finditer(text):
        word = match.group().rstrip(".,")
        if "{" in word and "}" not in word:
            continue  # a brace group cut by a line break: not a path we can read
        yield from expand(word)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", document.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def prose(source: Path) -> Iterator[str]:
    """What a module says in words: its docstrings (module, classes, functions) and comments."""
    text = source.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.string


def package_modules() -> list[Path]:
    return sorted(s for package in PACKAGES for s in (REPO / package).rglob("*.py"))


def test_the_documents_are_there() -> None:
    names = {d.relative_to(REPO).as_posix() for d in DOCUMENTS}
    assert names >= {
        "README.md",
        "docs/design.md",
        "docs/lighter-compatibility.md",
        "docs/operations.md",
        "docs/performance.md",
    }


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_every_relative_link_of_a_document_leads_to_a_file_and_anchor_that_exist(
    document: Path,
) -> None:
    broken: list[str] = []
    for target in LINK.findall(FENCE.sub("", document.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (document.parent / file).resolve() if file else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with that anchor in {linked.name}")
    assert broken == [], "\n".join(broken)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_every_repository_path_a_document_names_exists(document: Path) -> None:
    missing = sorted({p for p in named_paths(document.read_text()) if not exists(p)})
    assert missing == [], "\n".join(missing)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_repository_path_a_docstring_or_comment_of_a_package_names_exists(
    package: str,
) -> None:
    missing = [
        f"{source.relative_to(REPO)}: {path}"
        for source in package_modules()
        if source.relative_to(REPO).parts[0] == package
        for path in sorted({p for words in prose(source) for p in named_paths(words)})
        if not exists(path)
    ]
    assert missing == [], "\n".join(missing)


def test_nothing_points_at_a_file_outside_the_repository() -> None:
    sources = [
        *DOCUMENTS,
        *(REPO / name for name in ("Makefile", "setup.py", "raydex.yaml", "ray_cluster.yaml")),
        *package_modules(),
        *(s for package in PACKAGES for s in (REPO / package).rglob("*.c")),
    ]
    pointing = [
        f"{s.relative_to(REPO)}: {m.group()}"
        for s in sources
        for m in OUTSIDE.finditer(s.read_text())
    ]
    assert pointing == [], "\n".join(pointing)


#: config fields the deployment sets (chain, names, addresses, ports, the secret): not knobs
WIRED = frozenset(
    {"chain_id", "snapshot_dir", "data_plane_secret", "name", "sequencer_target", "group"}
    | {"reuse_port", "state_check_blocks", "network_id"}
)


def test_every_knob_of_the_deploy_spec_is_explained_in_operations_md() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    classes = (SequencerConfig, SnapshotConfig, ReplicaConfig, ApiConfig, GcSpec)
    knobs = {
        f.name
        for cls in (*classes, SequencerSpec, ReplicaGroupSpec)
        for f in dataclasses.fields(cls)
        if f.name not in WIRED and not f.name.endswith(("_host", "_port")) and f.init
    } - {"config", "replica", "gc", "api"}  # sections, with their own tables
    assert sorted(k for k in knobs if f"`{k}`" not in text and f"`gc.{k}`" not in text) == []


def test_the_path_reader_expands_braces_and_ignores_what_is_not_a_repository_path() -> None:
    text = (
        "see `actors/replica/{service,config}.py`, engine/, tests/faults/. "
        "Not /proc/self/task, ~/raydex/raydex.yaml, <session>/logs/x or https://h/engine/x."
    )
    assert list(named_paths(text)) == [
        "actors/replica/service.py",
        "actors/replica/config.py",
        "engine/",
        "tests/faults/",
    ]
    assert slug("The WAL: `fdatasync` (and zeros)") == "the-wal-fdatasync-and-zeros"
