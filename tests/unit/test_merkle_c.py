"""The committer's sparse Merkle tree in C (``actors/_smt.c``) computes what the Python reference
does: the same node hashes under the same keys, with SHA-NI and with the portable SHA-256, for
random trees updated in random batches; and it refuses malformed nodes instead of hashing them."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

import pytest

from raydex.actors import committer
from raydex.actors.committer import SparseMerkleTree

smt = committer._smt
pytestmark = pytest.mark.skipif(smt is None, reason="actors/_smt.c was not built here")


@pytest.fixture(params=["portable", "sha-ni"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    before = smt.backend()
    try:
        smt.set_backend(request.param)
    except ValueError:
        pytest.skip(f"this CPU has no {request.param}")
    try:
        yield request.param
    finally:
        smt.set_backend(before)


def test_sha256_of_64_bytes_is_hashlibs(backend: str) -> None:
    rng = random.Random(1)
    for data in (bytes(64), b"\xff" * 64, *(rng.randbytes(64) for _ in range(500))):
        assert smt.sha256_64(data) == hashlib.sha256(data).digest()
    with pytest.raises(ValueError):
        smt.sha256_64(bytes(63))


def test_the_c_update_builds_the_python_reference_tree_node_for_node(backend: str) -> None:
    rng = random.Random(2)
    c_tree, py_tree = SparseMerkleTree(), SparseMerkleTree()
    for batch in range(60):
        # a few accounts per block, sometimes one, sometimes many; small and 48-bit indexes
        n = rng.choice((1, 2, 3, 8, 40))
        leaves = {
            rng.choice((rng.randrange(300), rng.randrange(2**48))): rng.randbytes(32)
            for _ in range(n)
        }
        c_tree.update(leaves)
        py_tree._nodes[0].update(leaves)
        py_tree._update_py(set(leaves))
        assert c_tree.root == py_tree.root, f"batch {batch}"
    assert c_tree._nodes == py_tree._nodes


def test_a_malformed_node_is_refused() -> None:
    tree = SparseMerkleTree()
    tree.update({5: bytes(32)})
    tree._nodes[0][4] = b"short"  # a sibling of 5 that is not a hash
    with pytest.raises(ValueError, match="32 bytes"):
        smt.update(tree._nodes, tree._defaults, [5])
    with pytest.raises(OverflowError):
        smt.update(tree._nodes, tree._defaults, [-1])
    with pytest.raises(ValueError):
        smt.update(tree._nodes[:1], tree._defaults, [5])
    with pytest.raises(ValueError):
        smt.set_backend("md5")
