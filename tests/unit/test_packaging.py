"""Packaging: the folders install as ``raydex.<folder>`` and never shadow the standard library.

The slow test builds and installs a real (non-editable) wheel into a throwaway venv, offline:
``pip install --no-deps --no-build-isolation`` with the project's own environment visible to that
venv through a path file (so setuptools, pip and the runtime dependencies are the ones already
installed, and nothing is downloaded). The editable install's import hook is *not* visible there
(path files listed inside a path file are not processed), so what imports is the installed copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _subpackages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages: list[str] = config["tool"]["setuptools"]["packages"]
    return packages


def _run(python: Path | str, code: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [str(python), "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_folder_is_declared_as_a_raydex_subpackage() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    declared = set(_subpackages())
    found: set[str] = set()
    for name, folder in package_dir.items():
        assert name == f"raydex.{folder}"
        assert (ROOT / folder / "__init__.py").is_file()
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            found.add(".".join(("raydex", *rel)))
    assert declared == found, "pyproject.toml [tool.setuptools] packages != the folders on disk"


def test_stdlib_codecs_is_not_shadowed_and_raydex_codecs_is_ours() -> None:
    # From the project root, where a bare ``codecs/`` folder sits next to the interpreter's cwd.
    out = _run(
        sys.executable,
        "import codecs, raydex.codecs as rc;"
        "codecs.lookup('utf-8');"
        "print(codecs.__file__); print(rc.__file__); print(hasattr(rc, 'CreateOrder'))",
        ROOT,
    )
    stdlib_file, ours_file, has_create_order = out.split()
    assert Path(stdlib_file).parent == Path(sysconfig.get_paths()["stdlib"])
    assert Path(ours_file) == ROOT / "codecs" / "__init__.py"
    assert has_create_order == "True"


@pytest.mark.slow
def test_a_normal_wheel_install_imports_every_raydex_subpackage(tmp_path: Path) -> None:
    """Build + install offline into a temp venv (about 15-40 s here, mostly importing ray)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.py"):
        shutil.copy2(ROOT / name, src / name)
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for folder in config["tool"]["setuptools"]["package-dir"].values():
        # no *.so: the in-place build of the signing extension must not ride along, the wheel
        # build has to compile it
        shutil.copytree(
            ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        _run(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])", tmp_path).strip()
    )
    (site / "_raydex_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    done = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            str(src),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    imports = "; ".join(f"import {p}" for p in _subpackages())
    out = _run(
        python,
        f"import codecs; codecs.lookup('utf-8'); {imports}; import raydex.codecs, raydex.engine;"
        "import raydex.codecs.signing as s; from raydex.codecs.signing import _accel;"
        "print(raydex.codecs.__file__); print(raydex.engine.__file__); print(_accel.__file__);"
        "print(s.BACKEND)",
        tmp_path,
    )
    *files, backend = out.split()
    for line in files:
        assert Path(line).is_relative_to(site), line
    # a fresh install compiled the signature accelerator and uses it
    assert backend == "c"
