"""A driver the multi-host test runs inside a host of its cluster (``ip netns exec``), for what the
``raydex`` command does not print: ``python cluster_probe.py ADDRESS fund JSON`` registers each
``[account, api_key, pub_key_hex, usdc]`` with the sequencer's operator call (Lighter's L1 side);
``python cluster_probe.py ADDRESS groups`` prints every placement group Ray has not removed, as
one JSON list of ``{"id", "name", "state"}``. Each run is its own short-lived Ray driver, in an
anonymous namespace, as an operator's script would be.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import ray

from raydex.cluster.control.deploy import NAMESPACE, SEQUENCER
from raydex.codecs import Deposit, RegisterApiKey


def fund(entries: list[list[object]]) -> list[int]:
    ops: list[object] = []
    for account, api_key, pub, usdc in entries:
        ops += [RegisterApiKey(account, api_key, bytes.fromhex(str(pub))), Deposit(account, usdc)]
    seq = ray.get_actor(SEQUENCER, namespace=NAMESPACE)
    return [int(o.code) for o in ray.get(seq.operator.remote(ops), timeout=60)]


def groups() -> list[dict[str, str]]:
    return [
        {"id": gid, "name": g["name"], "state": g["state"]}
        for gid, g in ray.util.placement_group_table().items()
        if g["state"] != "REMOVED"
    ]


def main(argv: Sequence[str]) -> int:
    address, command, *rest = argv
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        if command == "fund":
            print(json.dumps(fund(json.loads(rest[0]))))
        elif command == "groups":
            print(json.dumps(groups()))
        else:
            print(f"unknown command {command!r}", file=sys.stderr)
            return 2
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
