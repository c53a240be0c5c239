"""Drive every entry point of the C signing extension over the SDK vectors, for valgrind.

    PYTHONMALLOC=malloc valgrind --tool=memcheck --error-exitcode=99 \\
        .venv/bin/python tests/kit/signing_memcheck.py

Exits 0 when every vector hashes and verifies and the bad inputs are refused; valgrind's own exit
code (99) reports a memory error in the extension. Slow under valgrind (~1-3 min).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

from raydex.codecs import signing as S


def main() -> int:
    assert S.ACCEL is not None, "the C extension is not built"
    c = S.ACCEL
    doc = json.loads(
        (Path(__file__).resolve().parents[1] / "unit/data/lighter_sdk_vectors.json").read_text()
    )
    pk = bytes.fromhex(doc["api_public_key"][2:])
    sk = bytes.fromhex(doc["api_private_key"][2:])
    assert S.public_key_of(sk, c) == pk
    cache = S.KeyCache(backend=c)
    for case in doc["cases"]:
        info = json.loads(case["tx_info"])
        hm = S.message_hash(case["tx_type"], info, doc["chain_id"], c)
        assert hm.hex() == case["tx_hash"], case["name"]
        sig = base64.b64decode(info["Sig"])
        assert cache.verify(pk, hm, sig), case["name"]
        assert not cache.verify(pk, hm, sig[:40] + sig[:40])
        own = S.sign(sk, hm, c)
        assert cache.verify(pk, hm, own)
    for bad in (b"\0" * 40, b"\xff" * 40, pk[:39], b"\1" + b"\0" * 39):
        assert c.module.decode_public_key(bad) is None or bad == b"\1" + b"\0" * 39
    assert c.module.hash_no_pad(list(range(100)), 30) == S.PURE.module.hash_no_pad(
        list(range(100)), 30
    )
    print(f"{len(doc['cases'])} vectors ok under the C backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
