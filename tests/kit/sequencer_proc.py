"""A sequencer in its own process for the fault suite: ``python -m kit.sequencer_proc SPEC``.

Runs the production ``SequencerActor`` shell outside Ray, so a failed start or a fatal fault ends
this process exactly as it ends an actor's (``exit_process``: status 70). SPEC is JSON:
``{"config": SequencerConfig fields, "setup": bool}``; with ``setup`` and a fresh exchange it
creates the market and funds the kit's traders. Prints ``READY <grpc port> <txlog port>`` on
stdout once serving; logs go to stderr, and so does whatever else prints (the shell's ``raydex
live`` line, which an actor writes to its stdout for Ray's log view). Stopped by the parent with
SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from raydex.actors.sequencer import SequencerActor, SequencerConfig

from .faults import setup_ops


async def main(spec: dict[str, object]) -> None:
    ready, sys.stdout = sys.stdout, sys.stderr  # stdout carries READY only
    cfg = SequencerConfig(**spec["config"])  # type: ignore[arg-type]
    actor = SequencerActor(cfg)
    status = await actor.start()
    if spec.get("setup") and status["seq"] == 0:
        await actor.operator(setup_ops(range(1, 9)))
    print(f"READY {cfg.data_port} {cfg.txlog_port}", file=ready, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(main(json.loads(sys.argv[1])))
