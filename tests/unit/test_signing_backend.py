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
                "verify_cached",
                "verify_uncached",
                "message_hash",
                "public_key",
            }
        )
        # the reference is orders of magnitude slower: a mixed-up label would show here
        assert med["pure"]["verify_cached"] > 20 * med["c"]["verify_cached"]
    assert "sign" in report["medians_us"].get("sdk", {}) or "sdk" in report["notes"]
