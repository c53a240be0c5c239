"""Which signature backend runs: the C one after ``make install``, never the pure one silently."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from raydex.codecs import signing as S


def test_this_install_runs_the_accelerated_backend() -> None:
    # make install (pip install -e .) compiles codecs/signing/_ecgfp5.c; the pure path here
    # would cap a replica at a few tx/s
    assert os.environ.get("RAYDEX_SIGNING", "") != "pure"
    assert S.ACCEL is not None
    assert S.ACCELERATED
    assert S.BACKEND == "c"
    assert S.ACTIVE is S.ACCEL


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def test_without_the_extension_the_fallback_is_loud() -> None:
    # the extension made unimportable, as on a machine without a C compiler
    done = _python(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "raydex.codecs.signing._accel":
                    raise ImportError("blocked for the test")
                return None

        sys.meta_path.insert(0, Block())
        import raydex.codecs.signing as s
        print(s.BACKEND, s.ACCELERATED)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["pure", "False"]
    assert "SigningFallbackWarning" in done.stderr
    assert "not built" in done.stderr


def test_raydex_signing_pure_forces_the_reference() -> None:
    done = _python(
        "import raydex.codecs.signing as s; print(s.BACKEND, s.ACCELERATED, s.ACCEL is None)",
        RAYDEX_SIGNING="pure",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["pure", "False", "False"]


def test_key_cache_decodes_each_key_once_and_caches_refusals() -> None:
    cache = S.KeyCache(max_keys=3)
    sk, pk = S.generate_key()
    hm = S.hash_to_quintic([1, 2, 3])
    sig = S.sign(sk, hm)
    for _ in range(3):
        assert cache.verify(pk, hm, sig)
    assert cache.decodes == 1
    for _ in range(3):
        assert not cache.verify(b"\0" * 40, hm, sig)
    assert cache.decodes == 2
    assert not cache.verify(pk, hm, sig[:-1])
    assert not cache.verify(pk, hm[:-1], sig)
    assert not cache.verify("not bytes", hm, sig)  # type: ignore[arg-type]
    assert not cache.verify(pk, hm, "sig")  # type: ignore[arg-type]
    for _ in range(3):
        S.KeyCache.key(cache, S.generate_key()[1])
    assert len(cache) <= 3


def test_key_cache_evicts_the_oldest_key_and_redecodes_it_on_return() -> None:
    cache = S.KeyCache(max_keys=2)
    assert cache.capacity == 2
    hm = S.hash_to_quintic([4, 5, 6])
    pairs = [S.generate_key() for _ in range(3)]
    sigs = [S.sign(sk, hm) for sk, _ in pairs]
    for (_, pk), sig in zip(pairs, sigs, strict=True):
        assert cache.verify(pk, hm, sig)
    # the third key pushed the first (oldest) out; the second stayed
    assert len(cache) == 2 and cache.evictions == 1 and cache.decodes == 3
    assert cache.verify(pairs[1][1], hm, sigs[1])
    assert cache.decodes == 3
    assert cache.verify(pairs[0][1], hm, sigs[0])  # decoded again, still verifies
    assert cache.decodes == 4 and cache.evictions == 2 and len(cache) == 2
    assert not cache.verify(pairs[0][1], hm, sigs[1])


def test_key_cache_is_bounded_by_the_bytes_of_its_key_tables() -> None:
    assert S.ACCEL is not None
    per_key = S.ACCEL.module.KEY_TABLE_BYTES  # type: ignore[attr-defined]
    cache = S.KeyCache(max_keys=1000, backend=S.ACCEL, max_bytes=3 * per_key)
    assert cache.capacity == 3
    for _ in range(5):
        assert cache.is_valid(S.generate_key()[1])
    assert len(cache) == 3 and cache.evictions == 2
    # the default keeps the pre-existing memory ceiling (~512 MiB of tables)
    assert S.KeyCache().capacity * per_key <= 512 << 20


def test_c_key_table_is_the_documented_comb() -> None:
    # 32 chunks of 10 bits, 16 affine multiples (80 bytes) each: 40 KB per key, 5 doublings
    from raydex.codecs.signing import _accel  # type: ignore[attr-defined]

    assert (_accel.PK_CHUNKS, _accel.PK_WINDOW, _accel.G_WINDOW) == (32, 5, 10)
    assert _accel.KEY_TABLE_BYTES == 32 * 16 * 80
    sk, pk = S.generate_key()
    table = _accel.decode_public_key(pk)
    assert isinstance(table, bytes) and len(table) == _accel.KEY_TABLE_BYTES
    hm = S.hash_to_quintic([7])
    assert _accel.verify(table, hm, S.sign(sk, hm))
    assert not _accel.verify(table[:-1], hm, S.sign(sk, hm))


def test_verify_first_in_a_fresh_process_builds_the_generator_table() -> None:
    # the fixed-base table is built on first use; verify may be a process's first call
    sk, pk = S.generate_key()
    hm = S.hash_to_quintic([8, 9])
    sig = S.sign(sk, hm)
    done = _python(
        f"""
        import raydex.codecs.signing as s
        pk, hm = bytes.fromhex("{pk.hex()}"), bytes.fromhex("{hm.hex()}")
        sig = bytes.fromhex("{sig.hex()}")
        print(s.verify(pk, hm, sig), s.verify(pk, hm, sig[:40] + bytes(40)))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_public_key_of_reduces_like_lighter_and_refuses_zero() -> None:
    sk, pk = S.generate_key()
    k = int.from_bytes(sk, "little")
    assert S.public_key_of((k + S.GROUP_ORDER).to_bytes(40, "little")) == pk
    for bad in (b"\0" * 40, S.GROUP_ORDER.to_bytes(40, "little"), b"\1" * 39):
        try:
            S.public_key_of(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad.hex()}")


def test_bench_signatures_reports_c_pure_and_the_sdk(capsys: object) -> None:
    from raydex.observability.bench import signatures

    report = signatures.run(json_out=True, rounds=1, pure_rounds=1)
    assert report["backend_in_use"] == "c"
    for key in ("medians_us", "cpu_medians_us"):
        med = report[key]
        assert (
            set(med["c"])
            == set(med["pure"])
            == {
                "sign",
                "sign_varied",
                "verify_cached",
                "verify_varied",
                "verify_uncached",
                "message_hash",
                "public_key",
            }
        )
        # the reference is orders of magnitude slower: a mixed-up label would show here
        assert med["pure"]["verify_cached"] > 20 * med["c"]["verify_cached"]
        assert med["pure"]["verify_varied"] > 20 * med["c"]["verify_varied"]
    assert "sign" in report["medians_us"].get("sdk", {}) or "sdk" in report["notes"]
