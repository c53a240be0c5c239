"""The compiled engine (mypyc, built by ``make``) and the pure-Python engine are the same machine:
the benchmark's command stream gives the same result codes, the same events and the same state
hash through both.

Each build runs in its own interpreter: the default one (compiled where ``make`` could build it)
and one where a meta-path finder loads every ``raydex.engine`` module from its ``.py`` source,
so the compiled extensions beside them are ignored (a module with no ``.py`` source is refused).
Where
nothing is compiled (no C compiler) both runs are pure Python and the test still checks the run
is deterministic across processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import raydex.engine

ENGINE_DIR = Path(raydex.engine.__file__).parent

#: Runs the first 20,000 commands of ``raydex bench engine``'s stream (seed 1), prints one line
#: of JSON: which build ran, and digests of the codes, the events and the final state.
_RUN = r"""
import hashlib, importlib.abc, importlib.util, json, sys
from pathlib import Path

if sys.argv[1] == "pure":
    engine_dir = Path(sys.argv[2])

    class _PureEngine(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.startswith("raydex.engine."):
                src = engine_dir / (name.rsplit(".", 1)[1] + ".py")
                if src.is_file():
                    return importlib.util.spec_from_file_location(name, src)
                # a module with no .py source (none today) is refused, not loaded compiled
                raise ModuleNotFoundError(name)
            return None

    sys.meta_path.insert(0, _PureEngine())

import raydex.engine
from raydex.engine import Engine
from raydex.observability.loadtest.workload import Workload, WorkloadConfig

wl = Workload(WorkloadConfig(seed=1, commands=20_000, chunk_size=5_000))
eng = Engine()
codes, events = hashlib.sha256(), hashlib.sha256()
setup = wl.setup()
streams = [(setup.commands, setup.now_ms)] + [(c.commands, c.now_ms) for c in wl.chunks()]
for cmds, nows in streams:
    for cmd, now in zip(cmds, nows, strict=True):
        out = []
        codes.update(b"%d," % eng.execute(cmd, now, out))
        for e in out:
            # Values, not reprs: a command's IntEnum field (OrderType.LIMIT) comes back a plain
            # int from the compiled engine (its fields are typed int) and as given from Python.
            fields = tuple(int(x) if isinstance(x, int) else x for x in e)
            events.update(repr((type(e).__name__, fields)).encode())
eng.validate_internal_state()
modules = sorted(
    m.__name__ for m in list(sys.modules.values())
    if getattr(m, "__name__", "").startswith("raydex.engine.")
    and not str(getattr(m, "__file__", "")).endswith(".py")
)
print(json.dumps({
    "compiled": raydex.engine.COMPILED,
    "native_modules": modules,
    "codes": codes.hexdigest(),
    "events": events.hexdigest(),
    "state_hash": eng.state_hash().hex(),
}))
"""


def _run(build: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, build, str(ENGINE_DIR)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_default_build_and_the_pure_python_engine_give_the_same_codes_events_and_hash() -> None:
    default = _run("default")
    pure = _run("pure")
    assert pure["compiled"] is False and pure["native_modules"] == []
    assert default["compiled"] == raydex.engine.COMPILED
    if default["compiled"]:
        assert "raydex.engine._orders" in default["native_modules"]
    for key in ("codes", "events", "state_hash"):
        assert default[key] == pure[key], key
