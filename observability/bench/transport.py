"""``raydex bench transport``: blocks from a publisher actor to a subscriber actor, every plane.

::

    driver ──control──► BenchPublisher actor ══ data plane ══► BenchSubscriber actor
                        BlockHub + GrpcDataPlaneServer          GrpcBlockSource
                                 + TcpDataPlaneServer           TcpBlockSource
                                 + RayBlockFanout               RayBlockSource (on_block)
                        raw asyncio TCP server                  asyncio.open_connection

Both ends are real Ray actors in their own processes (as the sequencer and a replica are), on a
local Ray started here (``num_cpus=2``, no dashboard) unless one is already running; only the
transport differs between runs:

- ``grpc``: :class:`GrpcBlockSource` over the hub's gRPC server (``raydex.actors.transport``).
- ``tcp``: :class:`TcpBlockSource` over the hub's plain-TCP server (``tcp_plane``: asyncio
  streams, length-prefixed frames, the same hub and reconnect semantics as gRPC).
- ``unix``: the same server and source through its Unix-domain socket, as followers on the
  sequencer's host connect (``tcp_plane``: ``tcp://host:port?unix=PATH``).
- ``ray``: :class:`RayBlockFanout` pumping ``on_block`` actor calls (window of 32 in flight).
- ``tcp_floor``: length-prefixed frames over a bare asyncio TCP stream, no hub: the floor.

The payload is a real 200-event block from :func:`raydex.codecs.encode_block` over the codec
benchmark's ``typical_events`` (~10-15 KB); per publish only the header's seq and
``timestamp_ns`` are rewritten (``time.time_ns()``, the host clock both processes share).

- latency (``p50_us``, ``p99_us``): ``LATENCY_BLOCKS`` blocks paced every ``INTERVAL_S`` (4 ms:
  every transport keeps up, so this is the hop, not a queue); one-way latency = receive time -
  header timestamp, over all but the first ``WARMUP`` blocks.
- latency at the sequencer's ~1 ms cadence (``p50_us_1ms``, ``p99_us_1ms``): the same with
  ``CADENCE_S``; a transport that cannot sustain 1,000 blocks/s shows its queueing here.
- tx round trips (``tx_rtt_p50_us``, ``tx_rtt_p99_us``; ``grpc``, ``tcp`` and ``unix``):
  ``TX_ROUND_TRIPS`` batches of ``TX_BATCH_BYTES`` from the subscriber to the publisher's tx
  handler (an echo of 40 bytes) one after the other: the replica -> sequencer hop without the
  sequencer's work. ``tx_rtt_cpu_us``: CPU time (user+system) of both processes per round trip
  over those batches: what the hop costs the machine, which is what the CPU ledger adds up.
- throughput: ``THROUGHPUT_BLOCKS`` blocks published back to back (the publisher yields to its
  loop between blocks, as a sequencer does); blocks/s = count / (last receive - first publish).

``default`` is the transport (of ``grpc``/``tcp``/``ray``) with the lowest p99 among those
sustaining at least ``REQUIRED_BLOCKS_PER_S`` (one block per ms); if none does, the fastest. It is
what this measurement recommends, not what a deployment runs: that is ``sequencer.data_plane``
(``DEFAULT_DATA_PLANE`` when the spec names none; the shipped raydex.yaml chooses tcp), chosen
with the loadtest's CPU ledger too (the whole deployment's CPU per tx).
Bounded: a few fixed-size runs plus Ray start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import time
from typing import Any

import ray
from ray.actor import ActorHandle

from raydex.actors.transport import (
    BlockHub,
    GrpcBlockSource,
    GrpcDataPlaneServer,
    GrpcTxChannel,
    OpenReply,
    RayBlockFanout,
    RayBlockSource,
    TcpBlockSource,
    TcpDataPlaneServer,
    target_of,
    tx_channel,
)
from raydex.actors.transport import block_source as tcp_source
from raydex.codecs import encode_block

from .codecs import typical_events

KINDS = ("grpc", "tcp", "unix", "ray", "tcp_floor")
TX_KINDS = ("grpc", "tcp", "unix")
PLANES = ("grpc", "tcp", "ray")
LATENCY_BLOCKS = 400
THROUGHPUT_BLOCKS = 1_000
WARMUP = 50
INTERVAL_S = 0.004
CADENCE_S = 0.001
REQUIRED_BLOCKS_PER_S = 1_000.0
#: tx batch round trips (replica -> sequencer -> replica) per plane, and the batch size (about
#: four signed txs)
TX_ROUND_TRIPS = 500
TX_BATCH_BYTES = 1_000
TIMEOUT_S = 60.0

_HEADER = struct.Struct("<QQQ")  # seq, height, timestamp_ns: the start of the block header
_LEN = struct.Struct("<I")


def _template() -> bytes:
    return bytes(encode_block(1, 1, 0, typical_events()))


def _stamp(template: bytes, seq: int) -> bytes:
    frame = bytearray(template)
    _HEADER.pack_into(frame, 0, seq, seq, time.time_ns())
    return bytes(frame)


def _timestamp_of(frame: bytes) -> int:
    return int(_HEADER.unpack_from(frame)[2])


async def _echo(frame: bytes) -> bytes:
    """The tx handler of the round-trip measurement: a 40-byte answer, as one outcome is."""
    return frame[:40]


class BenchPublisher:
    """Owns the hub, its gRPC server and Ray fanout, and a raw TCP server; publishes on demand."""

    def __init__(self) -> None:
        self.template = _template()
        self.hub = BlockHub(ring_size=4_096, queue_size=4_096)
        self.fanout = RayBlockFanout(self.hub, window=32)
        self.grpc = GrpcDataPlaneServer(self.hub, _echo)
        self.tcp = TcpDataPlaneServer(self.hub, _echo, unix_dir="")
        self.tcp_clients: list[asyncio.StreamWriter] = []
        self.tcp_server: asyncio.Server | None = None

    async def start(self) -> tuple[str, str, str, int, int]:
        """Start the servers; returns (grpc address, tcp plane target, the same through its Unix
        socket, tcp floor port, frame size)."""
        await self.grpc.start()
        port = await self.tcp.start()
        self.tcp_server = await asyncio.start_server(self._on_tcp, "127.0.0.1", 0)
        tcp_port = int(self.tcp_server.sockets[0].getsockname()[1])
        tcp = target_of("tcp", "127.0.0.1", port)
        unix = target_of("tcp", "127.0.0.1", port, self.tcp.unix_path)
        return self.grpc.address, tcp, unix, tcp_port, len(self.template)

    def cpu_s(self) -> float:
        """This process's CPU time (user+system) so far."""
        return time.process_time()

    async def stop(self) -> None:
        await self.fanout.close()
        await self.grpc.stop(grace=0)
        await self.tcp.stop()
        for writer in self.tcp_clients:
            writer.close()
        if self.tcp_server is not None:
            self.tcp_server.close()

    async def _on_tcp(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tcp_clients.append(writer)

    async def open_blocks(
        self, subscriber: ActorHandle[Any], name: str, from_seq: int
    ) -> OpenReply:
        return await self.fanout.open(subscriber, name, from_seq)

    def next_seq(self) -> int:
        return int(self.hub.last_seq) + 1

    async def wait_for_subscriber(self, kind: str) -> None:
        def ready() -> bool:
            if kind == "tcp_floor":
                return len(self.tcp_clients) >= 1
            subscribers: int = self.hub.statistics().subscribers
            return subscribers >= 1

        deadline = time.monotonic() + TIMEOUT_S
        while not ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {kind} subscriber")
            await asyncio.sleep(0.005)

    async def publish(self, kind: str, count: int, interval_s: float) -> None:
        first = self.hub.last_seq + 1
        for seq in range(first, first + count):
            frame = _stamp(self.template, seq)
            if kind == "tcp_floor":  # past the hub: seqs here are just labels
                for writer in self.tcp_clients:
                    writer.write(_LEN.pack(len(frame)) + frame)
            else:
                self.hub.publish_nowait(seq, frame)
            await asyncio.sleep(interval_s)


class BenchSubscriber:
    """Receives ``count`` blocks over one transport; returns (header timestamp, receive time)."""

    def __init__(self, publisher: ActorHandle[Any]) -> None:
        self.ray_source = RayBlockSource(publisher, name="bench", buffer=256)

    async def on_block(self, seq: int, frame: bytes) -> bool:
        accepted: bool = await self.ray_source.deliver(seq, frame)
        return accepted

    async def on_block_stream_closed(self) -> None:
        self.ray_source.stream_closed()

    async def receive(
        self, kind: str, target: str, from_seq: int, count: int
    ) -> list[tuple[int, int]]:
        if kind == "tcp_floor":
            return await self._receive_tcp(target, count)
        net_source: GrpcBlockSource | TcpBlockSource | None = None
        if kind == "grpc":
            net_source = GrpcBlockSource(target, name="bench")
        elif kind in ("tcp", "unix"):
            net_source = tcp_source(target, name="bench")
        source = net_source or self.ray_source
        stamps: list[tuple[int, int]] = []
        stream = source.subscribe(from_seq)
        try:
            async for _seq, frame in stream:
                stamps.append((_timestamp_of(frame), time.time_ns()))
                if len(stamps) == count:
                    break
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            if net_source is not None:
                await net_source.close()
        return stamps

    async def round_trips(self, kind: str, target: str, count: int) -> tuple[list[int], float]:
        """``count`` tx batches of ``TX_BATCH_BYTES`` one after the other: round trips in ns, and
        this process's CPU seconds over them."""
        channel = GrpcTxChannel(target) if kind == "grpc" else tx_channel(target)
        frame = bytes(TX_BATCH_BYTES)
        out: list[int] = []
        cpu = time.process_time()
        try:
            for _ in range(count):
                t0 = time.perf_counter_ns()
                await channel.submit(frame)
                out.append(time.perf_counter_ns() - t0)
            cpu = time.process_time() - cpu
            if kind == "unix" and not channel.local:
                raise RuntimeError("the unix run went over TCP: no socket found")
        finally:
            await channel.close()
        return out, cpu

    async def _receive_tcp(self, port: str, count: int) -> list[tuple[int, int]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(port))
        stamps: list[tuple[int, int]] = []
        try:
            for _ in range(count):
                (size,) = _LEN.unpack(await reader.readexactly(_LEN.size))
                frame = await reader.readexactly(size)
                stamps.append((_timestamp_of(frame), time.time_ns()))
        finally:
            writer.close()
        return stamps


#: The actor classes (``ray.remote`` of the plain classes above, which stay testable as objects).
PublisherActor: Any = ray.remote(num_cpus=0)(BenchPublisher)
SubscriberActor: Any = ray.remote(num_cpus=0)(BenchSubscriber)


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _measure(
    publisher: Any,
    subscriber: Any,
    kind: str,
    target: str,
    count: int,
    interval_s: float,
) -> list[tuple[int, int]]:
    from_seq: int = ray.get(publisher.next_seq.remote(), timeout=TIMEOUT_S)
    received = subscriber.receive.remote(kind, target, from_seq, count)
    ray.get(publisher.wait_for_subscriber.remote(kind), timeout=TIMEOUT_S)
    ray.get(publisher.publish.remote(kind, count, interval_s), timeout=TIMEOUT_S)
    stamps: list[tuple[int, int]] = ray.get(received, timeout=TIMEOUT_S)
    return stamps


def _one_way_us(stamps: list[tuple[int, int]]) -> list[float]:
    return sorted((recv - sent) / 1_000 for sent, recv in stamps[WARMUP:])


def _figures(
    paced: list[tuple[int, int]], cadence: list[tuple[int, int]], burst: list[tuple[int, int]]
) -> dict[str, float]:
    hop, loaded = _one_way_us(paced), _one_way_us(cadence)
    elapsed_s = (burst[-1][1] - burst[0][0]) / 1e9
    return {
        "p50_us": round(_percentile(hop, 0.50), 1),
        "p99_us": round(_percentile(hop, 0.99), 1),
        "p50_us_1ms": round(_percentile(loaded, 0.50), 1),
        "p99_us_1ms": round(_percentile(loaded, 0.99), 1),
        "blocks_per_s": round(len(burst) / elapsed_s, 1),
    }


def _default(result: dict[str, Any]) -> str:
    fast_enough = [k for k in PLANES if result[k]["blocks_per_s"] >= REQUIRED_BLOCKS_PER_S]
    if fast_enough:
        return min(fast_enough, key=lambda k: float(result[k]["p99_us"]))
    return max(PLANES, key=lambda k: float(result[k]["blocks_per_s"]))


def measure_all() -> dict[str, Any]:
    publisher = PublisherActor.remote()
    subscriber = SubscriberActor.remote(publisher)
    try:
        grpc_address, tcp_target, unix_target, tcp_port, frame_bytes = ray.get(
            publisher.start.remote(), timeout=TIMEOUT_S
        )
        targets = {
            "grpc": grpc_address,
            "tcp": tcp_target,
            "unix": unix_target,
            "ray": "",
            "tcp_floor": str(tcp_port),
        }
        result: dict[str, Any] = {}
        for kind in KINDS:
            target, count = targets[kind], LATENCY_BLOCKS + WARMUP
            paced = _measure(publisher, subscriber, kind, target, count, INTERVAL_S)
            cadence = _measure(publisher, subscriber, kind, target, count, CADENCE_S)
            burst = _measure(publisher, subscriber, kind, target, THROUGHPUT_BLOCKS, 0.0)
            result[kind] = _figures(paced, cadence, burst)
        for kind in TX_KINDS:
            before: float = ray.get(publisher.cpu_s.remote(), timeout=TIMEOUT_S)
            trips, client_cpu = ray.get(
                subscriber.round_trips.remote(kind, targets[kind], TX_ROUND_TRIPS + WARMUP),
                timeout=TIMEOUT_S,
            )
            server_cpu = ray.get(publisher.cpu_s.remote(), timeout=TIMEOUT_S) - before
            rtt = sorted(trips[WARMUP:])
            result[kind]["tx_rtt_p50_us"] = round(_percentile(rtt, 0.50) / 1_000, 1)
            result[kind]["tx_rtt_p99_us"] = round(_percentile(rtt, 0.99) / 1_000, 1)
            per_trip = (client_cpu + server_cpu) / len(trips)
            result[kind]["tx_rtt_cpu_us"] = round(per_trip * 1e6, 1)
        ray.get(publisher.stop.remote(), timeout=TIMEOUT_S)
    finally:
        ray.kill(subscriber)
        ray.kill(publisher)
    result["default"] = _default(result)
    result["frame_bytes"] = frame_bytes
    result["events_per_block"] = len(typical_events())
    result["latency_blocks"] = LATENCY_BLOCKS
    result["interval_ms"] = INTERVAL_S * 1_000
    result["cadence_ms"] = CADENCE_S * 1_000
    result["throughput_blocks"] = THROUGHPUT_BLOCKS
    return result


def run(json_out: bool = False) -> dict[str, Any]:
    """Measure (starting and stopping a local Ray unless one is up), print, return the figures."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = measure_all()
    finally:
        if started:
            ray.shutdown()
    if json_out:
        print(json.dumps(result))
    else:
        _print_table(result)
    return result


def _print_table(result: dict[str, Any]) -> None:
    print(
        f"transport: one block of {result['events_per_block']} events "
        f"({result['frame_bytes']} bytes), actor to actor on loopback"
    )
    columns = ("p50_us", "p99_us", "p50_us_1ms", "p99_us_1ms", "blocks_per_s")
    print(f"{'':12}" + "".join(f"{c:>14}" for c in columns))
    for kind in KINDS:
        print(f"{kind:12}" + "".join(f"{result[kind][c]:>14}" for c in columns))
    for kind in ("grpc", "tcp"):
        r = result[kind]
        print(f"tx round trip {kind:5} p50 {r['tx_rtt_p50_us']} us  p99 {r['tx_rtt_p99_us']} us")
    print(f"default: {result['default']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="raydex bench transport",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    run(json_out=parser.parse_args(argv).json)
    return 0


if __name__ == "__main__":
    # Re-enter through the installed module so Ray workers import the actor classes by name.
    from .transport import main as _main

    raise SystemExit(_main())
