"""C extensions: the optional accelerators, and the mypyc-compiled engine where a compiler exists.
Everything else comes from pyproject.toml.

Every C extension is optional: without a C compiler or the Python headers the install still
succeeds (setuptools prints the compiler error) and raydex runs the Python twin of each, which is
also the reference its tests compare it with. The signature accelerator (``codecs/signing/
_ecgfp5.c``) is the one whose absence is loud: ``raydex.codecs.signing`` then warns at import and
runs the pure-Python reference (~1000x slower; ``raydex status`` and the metrics say ``pure``).

The engine (``RAYDEX_MYPYC``; the pure-Python engine is the reference and the fallback, both give
the same events and state hash):

- unset or ``0``: pure Python (a plain ``pip install .``);
- ``auto`` (``make install`` / ``make engine``): compile when mypyc is importable *and* a probe
  compile against the Python headers works, else say why and install the pure-Python engine;
- ``1``: compile, or fail.

Compiled modules (``MYPYC_MODULES``; the benchmark's bare-book floor too, so the engine-vs-bare
ratio compares like with like) become extensions beside the sources that take precedence at
import, e.g. ``RAYDEX_MYPYC=1 pip install --no-build-isolation -e .`` (no build isolation: the
build uses the environment's mypyc, from the ``lint`` extra).

Caller duty for the editable form: the ``.so`` files shadow ``engine/*.py``, so after editing the
engine rebuild (``make engine``; ``make test``/``bench``/``demo`` do it when a source is newer) or
delete them (``make pure``); ``raydex.engine.COMPILED`` says which runs, and ``tests/conftest.py``
stops a test run on a stale build. mypyc names a module by the folders above it holding an
``__init__.py``, so the sources are staged under ``build/mypyc_src/raydex/engine/``. Cost: about a
minute of compile on an idle core.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from setuptools import Extension, setup

#: Engine modules compiled by mypyc: all but ``_validate`` (a slow O(state) self-check),
#: ``_funding`` / ``_digest`` (one tick per market per minute; snapshot-time hashing) and
#: ``__init__``. They are compiled together (one group), so calls between them are native.
MYPYC_MODULES = (
    "_engine.py",
    "_state.py",
    "_deltas.py",
    "_orders.py",
    "_pending.py",
    "_triggers.py",
    "_accounts.py",
    "_markets.py",
    "_liquidation.py",
    "_snapshot.py",
    "_model.py",
    "rules.py",
    "codes.py",
)

#: The engine benchmark's floors (``BareBook``, ``NullBook``), compiled with the engine and the
#: same options, so ``raydex bench engine`` compares a compiled engine with a compiled floor. Their
#: own mypyc run and group (shared library), in their own package: the engine's holds the engine.
MYPYC_FLOORS = "observability/bench/floors.py"


def _compiler_problem() -> str:
    """Why a C extension cannot be built here ("" when a probe against Python.h compiles)."""
    import sysconfig
    import tempfile

    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    try:
        cc = new_compiler()
        customize_compiler(cc)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "probe.c"
            src.write_text("#include <Python.h>\nint raydex_probe(void) { return 0; }\n")
            cc.compile([str(src)], output_dir=tmp, include_dirs=[sysconfig.get_paths()["include"]])
    except Exception as e:  # any failure means: no usable compiler or headers
        return f"{type(e).__name__}: {e}"
    return ""


def _mypyc_extensions() -> list[Any]:
    mode = os.environ.get("RAYDEX_MYPYC", "")
    if mode not in ("1", "auto"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as e:
        if mode == "auto":
            print("raydex: mypyc not importable; installing the pure-Python engine", flush=True)
            return []
        raise SystemExit(
            "RAYDEX_MYPYC=1 needs mypyc in the build environment: install the lint extra "
            "(pip install -e '.[lint]') and build with --no-build-isolation"
        ) from e
    problem = _compiler_problem()
    if problem:
        if mode == "auto":
            print(f"raydex: no working C compiler ({problem}); pure-Python engine", flush=True)
            return []
        raise SystemExit(f"RAYDEX_MYPYC=1 needs a C compiler and Python headers: {problem}")

    root = Path(__file__).resolve().parent
    stage = root / "build" / "mypyc_src"
    if stage.exists():
        shutil.rmtree(stage)
    engine = _staged(stage, "raydex.engine", [root / "engine" / n for n in MYPYC_MODULES])
    floors = _staged(stage, "raydex.observability.bench", [root / MYPYC_FLOORS])
    cwd = os.getcwd()
    os.chdir(stage)  # mypy derives module names (raydex.engine.*, ...) from the staged tree
    try:
        return [
            *mypycify(
                ["--ignore-missing-imports", *engine],
                opt_level="3",
                group_name="raydex.engine._native",
                target_dir=str(root / "build" / "mypyc_c"),
            ),
            *mypycify(
                ["--ignore-missing-imports", *floors],
                opt_level="3",
                group_name="raydex.observability.bench._native",
                target_dir=str(root / "build" / "mypyc_c"),
            ),
        ]
    finally:
        os.chdir(cwd)


def _staged(stage: Path, package: str, sources: list[Path]) -> list[str]:
    """Copy ``sources`` into ``stage`` as modules of ``package`` (with an empty ``__init__.py``
    in each folder above them); their paths relative to ``stage``."""
    folder = stage
    for part in package.split("."):
        folder = folder / part
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").touch()
    for src in sources:
        shutil.copy2(src, folder / src.name)
    return [str((folder / src.name).relative_to(stage)) for src in sources]


SIGNING_EXTENSION = Extension(
    "raydex.codecs.signing._accel",
    sources=["codecs/signing/_ecgfp5.c"],
    extra_compile_args=["-O3", "-std=gnu11", "-fno-strict-aliasing"],
    optional=True,
)

#: the committer's sparse Merkle tree update (actors/_smt.c); optional: without it the committer
#: runs the same update in Python (several times slower per node)
MERKLE_EXTENSION = Extension(
    "raydex.actors._smt",
    sources=["actors/_smt.c"],
    extra_compile_args=["-O3", "-std=gnu11", "-fno-strict-aliasing"],
    optional=True,
)

#: immutable records (NamedTuples of atoms) out of the cyclic GC's lists (observability/_untrack.c);
#: optional: without it the records stay tracked and every collection walks them (longer pauses)
UNTRACK_EXTENSION = Extension(
    "raydex.observability._untrack",
    sources=["observability/_untrack.c"],
    extra_compile_args=["-O2", "-std=gnu11"],
    optional=True,
)

#: ``raydex.codecs._blockdec`` (``codecs/_blockdec.c``): a block's events decoded in one C loop
#: (the replica's and the holder's hot decode). Optional: without it ``decode_block`` runs its
#: Python loop (the same events).
BLOCKDEC_EXTENSION = Extension(
    "raydex.codecs._blockdec",
    sources=["codecs/_blockdec.c"],
    extra_compile_args=["-O2", "-std=gnu11"],
    optional=True,
)
#: ``raydex.actors.replica.cache._cacheloop`` (``actors/replica/cache/_cacheloop.c``): a block's
#: per-tx events into the replica's caches in one C loop; optional, the Python loop otherwise.
CACHELOOP_EXTENSION = Extension(
    "raydex.actors.replica.cache._cacheloop",
    sources=["actors/replica/cache/_cacheloop.c"],
    extra_compile_args=["-O2", "-std=gnu11"],
    optional=True,
)
#: ``raydex.actors.replica.ws._bookjson`` (``actors/replica/ws/_bookjson.c``): the order_book
#: channel's update message rendered in C; optional, encoded from its body in Python otherwise.
BOOKJSON_EXTENSION = Extension(
    "raydex.actors.replica.ws._bookjson",
    sources=["actors/replica/ws/_bookjson.c"],
    extra_compile_args=["-O2", "-std=gnu11"],
    optional=True,
)

#: ``raydex.cluster._hugearena`` (``cluster/_hugearena.c``): pymalloc's arenas from 2 MiB-aligned
#: MADV_HUGEPAGE regions (``cluster/hugepages.py``); optional, 4 KiB-page arenas otherwise.
HUGEARENA_EXTENSION = Extension(
    "raydex.cluster._hugearena",
    sources=["cluster/_hugearena.c"],
    extra_compile_args=["-O2", "-std=gnu11"],
    optional=True,
)

setup(
    ext_modules=[
        SIGNING_EXTENSION,
        BLOCKDEC_EXTENSION,
        CACHELOOP_EXTENSION,
        BOOKJSON_EXTENSION,
        MERKLE_EXTENSION,
        UNTRACK_EXTENSION,
        HUGEARENA_EXTENSION,
        *_mypyc_extensions(),
    ]
)
