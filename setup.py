"""Optional mypyc build of ``raydex.engine``; everything else comes from pyproject.toml.

Pure Python is the default and the fallback: without ``RAYDEX_MYPYC=1`` this file adds nothing.
With it, the engine's modules (all but ``_validate``; ``_bare_book`` included: the floor is compiled
too, so the engine-vs-bare-book ratio stays a like-for-like comparison) are compiled to C
extensions that sit beside the sources and take precedence over them at import:

    RAYDEX_MYPYC=1 pip install --no-build-isolation .      # a wheel with the compiled engine
    RAYDEX_MYPYC=1 pip install --no-build-isolation -e .   # editable: .so files land in engine/

(``--no-build-isolation`` so the build uses the mypy/mypyc already in the environment, from the
``lint`` extra; with isolation pip would need ``mypy`` in ``[build-system] requires``.)

Caller duty for the editable form: the ``.so`` files shadow ``engine/*.py``, so after editing
the engine rebuild, or delete ``engine/*.so`` to go back to pure Python
(``raydex.engine.COMPILED`` says which one is running).

Cost: one mypyc + C compile of the engine modules, a few minutes on an idle core. mypyc names a
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

from setuptools import setup

#: Engine modules compiled by mypyc: all but ``_validate`` (a slow O(state) self-check) and
#: ``__init__``. They are compiled together (one group), so calls between them are native.
MYPYC_MODULES = (
    "_engine.py",
    "_state.py",
    "_orders.py",
    "_accounts.py",
    "_markets.py",
    "_liquidation.py",
    "_snapshot.py",
    "_model.py",
    "_bare_book.py",
    "rules.py",
    "codes.py",
)


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


setup(ext_modules=_mypyc_extensions())
