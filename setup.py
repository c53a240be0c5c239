"""C extensions: the signature accelerator (always tried) and an optional mypyc engine build.

Everything else comes from pyproject.toml.

``raydex.codecs.signing._accel`` (``codecs/signing/_ecgfp5.c``, Lighter's Schnorr/ECgFp5/
Poseidon2) is built by every ``pip install`` (``make install``). It is an optional extension: if
the C compiler or the Python headers are missing, the install still succeeds, setuptools prints
the compiler error and a warning, and at import ``raydex.codecs.signing`` warns loudly and runs
the pure-Python reference (``ACCELERATED`` is False, ``raydex status`` and the metrics show
``pure``). Build cost: one C file, ~5 s.

mypyc engine build:

Pure Python is the default and the fallback: without ``RAYDEX_MYPYC=1`` this file adds nothing.
With it, the engine's hot modules (``_engine``, ``_model``, ``_bare_book``: the floor is compiled
too, so the engine-vs-bare-book ratio stays a like-for-like comparison) are compiled to C
extensions that sit beside the sources and take precedence over them at import:

    RAYDEX_MYPYC=1 pip install --no-build-isolation .      # a wheel with the compiled engine
    RAYDEX_MYPYC=1 pip install --no-build-isolation -e .   # editable: .so files land in engine/

(``--no-build-isolation`` so the build uses the mypy/mypyc already in the environment, from the
``lint`` extra; with isolation pip would need ``mypy`` in ``[build-system] requires``.)

Caller duty for the editable form: the ``.so`` files shadow ``engine/*.py``, so after editing
the engine rebuild, or delete ``engine/*.so`` to go back to pure Python
(``raydex.engine.COMPILED`` says which one is running).

Cost: one mypyc + C compile of the three modules, ~1 minute on an idle core. mypyc names a
module by the directories above it that hold an ``__init__.py``; ``engine/`` is mapped to
``raydex.engine`` only through ``package-dir``, so the sources are staged under
``build/mypyc_src/raydex/engine/`` and compiled from there (``raydex.codecs`` is left out of
the mypyc run: its types reach the engine as ``Any``, which compiles to generic calls).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from setuptools import Extension, setup

#: Engine modules compiled by mypyc (``_validate`` and ``_workload`` stay interpreted).
MYPYC_MODULES = ("_engine.py", "_model.py", "_bare_book.py")


def _mypyc_extensions() -> list[Any]:
    if os.environ.get("RAYDEX_MYPYC", "") != "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as e:
        raise SystemExit(
            "RAYDEX_MYPYC=1 needs mypyc in the build environment: install the lint extra "
            "(pip install -e '.[lint]') and build with --no-build-isolation"
        ) from e

    root = Path(__file__).resolve().parent
    stage = root / "build" / "mypyc_src"
    pkg = stage / "raydex" / "engine"
    if stage.exists():
        shutil.rmtree(stage)
    pkg.mkdir(parents=True)
    (stage / "raydex" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    for name in MYPYC_MODULES:
        shutil.copy2(root / "engine" / name, pkg / name)
    cwd = os.getcwd()
    os.chdir(stage)  # mypy derives module names (raydex.engine.*) from the staged tree
    try:
        return list(
            mypycify(
                ["--ignore-missing-imports", *(f"raydex/engine/{n}" for n in MYPYC_MODULES)],
                opt_level="3",
                group_name="raydex.engine._native",
                target_dir=str(root / "build" / "mypyc_c"),
            )
        )
    finally:
        os.chdir(cwd)


SIGNING_EXTENSION = Extension(
    "raydex.codecs.signing._accel",
    sources=["codecs/signing/_ecgfp5.c"],
    extra_compile_args=["-O3", "-std=gnu11", "-fno-strict-aliasing"],
    optional=True,
)

setup(ext_modules=[SIGNING_EXTENSION, *_mypyc_extensions()])
