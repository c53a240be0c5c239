"""The fault-injection kit (tests/faults): real files, loopback gRPC, every wait with a deadline.

::

    Load (signed orders, one tx channel)    ──Txs──► sequencer (in this process, or a child
        records every acknowledged outcome             process: kit/sequencer_proc.py, so that it
                                                       can be SIGKILLed or run on a tiny disk)
    SnapshotService (in this process) ◄──tx log / deltas──┘
    audit(): a copy of the WAL replayed from seq 0 by the production recovery code

A :class:`Load` acknowledged through a replica (``via``) is acknowledged as a client's tx is: once
its block is applied there; through the sequencer's data plane, once the block is durable.

Every fault test ends with :func:`verify`: the holder reaches the sequencer's seq, every
acknowledged outcome is in the audit (same tx hash, same block, same code), and the state hashes
of the sequencer (when in process), the holder and the audit replay are equal. :data:`TALLY`
counts faults injected/survived and acknowledged txs checked/lost for the session summary.

A trader whose batch failed (outcome unknown) sends the *same* signed tx again after the fault,
as a client must after 21822: ``INVALID_NONCE`` then means the first copy had executed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raydex.actors.local import eth_market
from raydex.actors.replica import ApiError
from raydex.actors.sequencer import BlockProducer, SequencerConfig, Wal, WalError
from raydex.actors.snapshot import SnapshotConfig, SnapshotService
from raydex.actors.transport import TransportError, TxChannel, tx_channel
from raydex.cluster.control.deploy import free_port
from raydex.codecs import (
    DEFAULT_CHAIN_ID,
    CreateOrder,
    Deposit,
    RegisterApiKey,
    ResultCode,
    TxOutcome,
    Verifier,
    decode_outcomes,
    encode_batch,
    generate_key,
    peek_wal_record,
    sign_tx,
    tx_hash_of,
)
from raydex.engine import state_digest

SEED, PUB = generate_key()
FAR = 4_000_000_000_000
#: how long any single wait in a fault test may take before the test fails (never hangs)
DEADLINE_S = 60.0

#: session totals, printed by tests/faults/conftest.py
TALLY: Counter[str] = Counter()


# --- damaging a WAL segment where its records are (a preallocated one ends in zeros) ----------


def newest_segment(wal_dir: Path) -> Path:
    return sorted(wal_dir.glob("wal-*.log"))[-1]


def records_end(data: bytes) -> int:
    """Where the valid records of a segment end (what follows: zeros if preallocated)."""
    off = 0
    while (info := peek_wal_record(data, off)) is not None:
        off = info.end
    return off


def flip_in_last_record(seg: Path, back: int, mask: int) -> None:
    """XOR ``mask`` into the byte ``back`` bytes before the end of the segment's records."""
    data = bytearray(seg.read_bytes())
    data[records_end(bytes(data)) - back] ^= mask
    seg.write_bytes(bytes(data))


def tear(seg: Path, partial: bytes) -> None:
    """A crash mid-write: ``partial`` (the start of a record) where the next record would go."""
    end = records_end(seg.read_bytes())
    with open(seg, "r+b") as f:
        os.pwrite(f.fileno(), partial, end)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (see ``deploy.free_port``: outside the ephemeral range)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def sequencer_config(tmp: Path, **kw: Any) -> SequencerConfig:
    """Fixed free ports (followers reconnect to a restarted sequencer), no WAL pruning (the
    audit replays the whole WAL from seq 0)."""
    data_port, txlog_port = free_ports(2)
    base = SequencerConfig(
        wal_dir=str(tmp / "wal"),
        snapshot_dir=str(tmp / "snap"),
        data_port=data_port,
        txlog_port=txlog_port,
        wal_keep_blocks=10**9,
        maintenance_interval_s=0.2,
    )
    return dataclasses.replace(base, **kw)


def targets(cfg: SequencerConfig) -> tuple[str, str]:
    return f"127.0.0.1:{cfg.data_port}", f"127.0.0.1:{cfg.txlog_port}"


def setup_ops(accounts: range) -> list[Any]:
    ops: list[Any] = [eth_market()]
    for a in accounts:
        ops += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    return ops


async def until(cond: Callable[[], bool], what: str, seconds: float = DEADLINE_S) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"not reached within {seconds:.0f} s: {what}")
        await asyncio.sleep(0.02)


# ---- load ----------------------------------------------------------------------------------------


@dataclass
class Trader:
    account: int
    nonce: int = 0
    pending: CreateOrder | None = None
    resent: bool = False

    def next_tx(self) -> CreateOrder:
        if self.pending is None:
            is_ask = self.account % 2
            price = 300_000 + (self.nonce % 5) * 10 if is_ask else 300_040 - (self.nonce % 5) * 10
            tx = CreateOrder(
                self.account, 0, 0, self.nonce + 1, 10, price, is_ask,
                0, 1, 0, 0, -1, FAR, self.nonce, bytes(80),
            )  # fmt: skip
            self.pending, self.resent = sign_tx(tx, SEED), False
        return self.pending

    def unknown(self) -> None:
        self.resent = True  # the same signed tx goes out again

    def settle(self, code: int) -> None:
        if code == ResultCode.INVALID_NONCE and not self.resent:
            raise AssertionError(f"trader {self.account} lost track of its nonce")
        self.nonce += 1
        self.pending = None


#: a replica's ``execute_txs``: the outcomes, returned once their block is applied there
Submit = Callable[[list[Any]], Awaitable[list[TxOutcome]]]


@dataclass
class Load:
    """Rounds of one signed order per trader, one batch per round, over the real data plane; or,
    with ``via`` (a replica's ``execute_txs``), through a replica, acknowledged as a client is:
    once the block is applied there."""

    target: str
    traders: list[Trader]
    acked: list[TxOutcome] = field(default_factory=list)
    #: tx hash -> the signed tx, for every tx sent
    sent: dict[bytes, CreateOrder] = field(default_factory=dict)
    unknown: int = 0
    rounds: int = 0
    via: Submit | None = None
    #: the data-plane secret the load carries (a deployment member's), and its channel: the
    #: plane the target names (``host:port`` gRPC, ``tcp://host:port`` TCP)
    secret: str = ""
    _channel: TxChannel | None = None

    async def round(self) -> bool:
        """One batch; True when acknowledged (its outcomes recorded), False when unknown."""
        txs = [t.next_tx() for t in self.traders]
        self.sent.update((tx_hash_of(tx, DEFAULT_CHAIN_ID), tx) for tx in txs)  # the outcome's hash
        self.rounds += 1
        try:
            if self.via is not None:
                outs = await asyncio.wait_for(self.via(list(txs)), 10.0)
            else:
                if self._channel is None:
                    self._channel = tx_channel(self.target, secret=self.secret)
                reply = await asyncio.wait_for(self._channel.submit(encode_batch(txs)), 10.0)
                outs = decode_outcomes(reply)
        except (TransportError, TimeoutError, OSError, ApiError) as exc:
            del exc
            self.unknown += len(txs)
            for t in self.traders:
                t.unknown()
            await self._reset()
            return False
        for t, o in zip(self.traders, outs, strict=True):
            t.settle(o.code)
        self.acked.extend(outs)
        return True

    async def run(self, rounds: int, pause_s: float = 0.0) -> int:
        ok = 0
        for _ in range(rounds):
            ok += await self.round()
            await asyncio.sleep(pause_s)
        return ok

    async def run_until_acked(self, rounds: int) -> None:
        """``rounds`` acknowledged rounds (retrying unknown ones, within the deadline)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + DEADLINE_S
        done = 0
        while done < rounds:
            if loop.time() > end:
                raise AssertionError(f"only {done} of {rounds} rounds acknowledged in time")
            if await self.round():
                done += 1
            else:
                await asyncio.sleep(0.1)

    async def _reset(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def close(self) -> None:
        await self._reset()


def traders(n: int = 6) -> list[Trader]:
    return [Trader(a) for a in range(1, n + 1)]


# ---- the audit -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Audit:
    seq: int
    state_hash: str
    #: (tx hash, block seq) -> result code, for every tx of every block replayed from the WAL
    outcomes: dict[tuple[bytes, int], int]
    #: the snapshot the replay started from (0: none); blocks up to it are checked by state
    start_seq: int = 0
    #: (account, api key) -> the next nonce, in the audited state
    next_nonce: dict[tuple[int, int], int] = field(default_factory=dict)


def audit(wal_dir: Path, scratch: Path, snapshot_dir: Path | None = None) -> Audit:
    """Replay a copy of the WAL with the production recovery code: from seq 0, or (when the WAL
    no longer starts at 1, e.g. a cut tail was recovered from a snapshot) from a copy of the
    snapshots."""
    copy = scratch / f"audit-{len(list(scratch.glob('audit-*')))}"
    shutil.copytree(wal_dir, copy / "wal")
    snaps = copy / "snap"
    if snapshot_dir is not None:
        shutil.copytree(snapshot_dir, snaps, ignore=shutil.ignore_patterns(".*"))
    wal = Wal(copy / "wal")
    producer, _ = BlockProducer.recover(snaps, wal, Verifier(), keep_blocks=10**9)
    outcomes = {
        (o.tx_hash, o.seq): o.code for block in producer.recovered_blocks for o in block.outcomes
    }
    start = producer.recovered_from.seq if producer.recovered_from is not None else 0
    engine = producer.engine
    nonces = {(a, 0): engine.next_nonce(a, 0) or 0 for a in range(1, 65)}
    wal.close()
    digest = state_digest(engine.records()).hex()
    return Audit(producer.seq, digest, outcomes, start, nonces)


def check_acks(load: Load, found: Audit) -> list[TxOutcome]:
    """The acknowledged outcomes missing from the audit (or with another code): must be [].
    A tx in a block the audit's snapshot holds is checked by state: its nonce was used."""
    lost = []
    for o in load.acked:
        if o.seq <= found.start_seq:
            tx = load.sent[o.tx_hash]
            if found.next_nonce.get((tx.account_index, tx.api_key_index), 0) <= tx.nonce:
                lost.append(o)
        elif found.outcomes.get((o.tx_hash, o.seq)) != o.code:
            lost.append(o)
    TALLY["acked txs checked"] += len(load.acked)
    TALLY["acked txs lost"] += len(lost)
    return lost


async def verify(
    tmp: Path,
    cfg: SequencerConfig,
    holder: SnapshotService,
    load: Load,
    sequencer_hash: Callable[[], dict[str, Any]] | None = None,
) -> Audit:
    """The end of every fault test (see the module docstring). With ``sequencer_hash`` (an
    in-process sequencer) the holder must reach its seq; else (a child process, stopped by the
    caller afterwards) the holder must reach the newest acknowledged block."""
    if sequencer_hash is not None:
        want = sequencer_hash()
        await until(lambda: holder.seq == want["seq"], f"holder at seq {want['seq']}")
    else:
        newest = max(o.seq for o in load.acked)
        await until(lambda: holder.seq >= newest, f"holder at seq {newest}")
        want = None
    got = holder.state_hash()
    if want is not None:
        assert got == want, (got, want)
    return await asyncio.to_thread(lambda: _finish(tmp, cfg, got, load))


def _finish(tmp: Path, cfg: SequencerConfig, got: dict[str, Any], load: Load) -> Audit:
    try:
        found = audit(Path(cfg.wal_dir), tmp)
    except WalError:  # the WAL has a hole a snapshot covers (a cut tail recovered from it)
        found = audit(Path(cfg.wal_dir), tmp, Path(cfg.snapshot_dir))
    assert (found.seq, found.state_hash) == (got["seq"], got["state_hash"]), (found.seq, got)
    lost = check_acks(load, found)
    assert lost == [], f"{len(lost)} acknowledged txs lost: {lost[:3]}"
    assert load.acked, "the test acknowledged nothing"
    return found


def holder_config(tmp: Path, **kw: Any) -> SnapshotConfig:
    return SnapshotConfig(dir=str(tmp / "snap"), every_seconds=600, retry_s=0.05, **kw)


# ---- a sequencer in a child process --------------------------------------------------------------


class SequencerProcess:
    """``kit/sequencer_proc.py`` in a child process: the real ``SequencerActor`` shell outside
    Ray (its start and fatal paths end the process). ``fsize_limit`` runs it under
    ``RLIMIT_FSIZE`` (writes past it fail with EFBIG: a full disk for the WAL, no root needed)."""

    def __init__(self, cfg: SequencerConfig, log_path: Path) -> None:
        self.cfg = cfg
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, setup: list[Any] | None = None, fsize_limit: int = 0) -> None:
        spec = {"config": dataclasses.asdict(self.cfg), "setup": bool(setup)}
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
        log = open(self.log_path, "ab")  # noqa: SIM115  # the child owns it until it exits

        def limits() -> None:  # in the child, before exec (SIG_IGN survives the exec)
            import resource

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kit.sequencer_proc", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            preexec_fn=limits if fsize_limit else None,
        )
        log.close()
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), DEADLINE_S)
        if not line.startswith(b"READY"):
            raise AssertionError(f"sequencer child did not start: {line!r}\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> int:
        """SIGKILL (no cleanup at all); the exit status."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        return self.wait()

    def wait(self, timeout: float = DEADLINE_S) -> int:
        assert self.proc is not None
        status = self.proc.wait(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return status

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
