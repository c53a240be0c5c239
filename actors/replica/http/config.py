"""Tuning knobs of the API replica (its app, fan-out, ports and deadlines); each says what it
trades. Invalid combinations raise ``ValueError`` when the config is built."""

from __future__ import annotations

from dataclasses import dataclass

from raydex.codecs import DEFAULT_CHAIN_ID


@dataclass(frozen=True, slots=True)
class ApiConfig:
    #: Largest accepted request body (bytes); beyond it HTTP 413 / code 20004. Bigger admits larger
    #: batches but lets one client make the replica buffer more.
    max_body_bytes: int = 256 * 1024
    #: Serve ``sendTx``/``sendTxBatch`` through the fast lane (fastlane.py: a plain HTTP/1.1
    #: protocol in front of aiohttp, less CPU per request); False: aiohttp serves all.
    fast_lane: bool = True
    #: Most txs in one ``sendTxBatch`` (Lighter: 50; code 21514 beyond).
    max_batch: int = 50
    #: Largest WS message a client may send (aiohttp closes the socket with 1009 beyond).
    ws_max_message_bytes: int = 256 * 1024
    #: Txs one WS connection may have in flight (sent, not yet answered); 21506 beyond. More
    #: lets a client pipeline deeper; each in-flight tx holds a task and its pending nonce.
    ws_max_inflight_txs: int = 256
    #: Subscriptions per WS connection (Lighter: 100; code 30004 beyond).
    max_subscriptions: int = 100
    #: Messages a connection's send queue holds before order-book updates are conflated. Larger
    #: rides out longer client stalls unconflated, at the cost of memory and staler data.
    ws_queue_limit: int = 256
    #: Conflations since the client last caught up after which it is disconnected (code 30006).
    #: Larger tolerates slower clients, which then see ever coarser books.
    ws_conflation_limit: int = 1024
    #: Kernel send buffer per WS socket (SO_SNDBUF), None = system default. Smaller makes a slow
    #: client show up in its queue sooner (less data parked in the kernel).
    ws_send_buffer_bytes: int | None = None
    #: Seconds a slow client's close handshake may take before its socket is aborted.
    ws_close_timeout_s: float = 1.0
    #: Longest lifetime (s) of an auth token for private reads (auth.py): a token whose deadline
    #: is further away is refused (20013). Lighter: 8 hours (the SDK's default is 10 minutes).
    #: Longer lets clients re-sign less often; a leaked token reads the account for longer.
    auth_max_lifetime_s: int = 8 * 3600
    #: Most levels/orders/trades a REST list answer holds.
    max_list_limit: int = 250
    network_id: int = DEFAULT_CHAIN_ID
    #: What ``sendTx`` tells clients about execution time (ms); the block cadence.
    predicted_execution_time_ms: int = 1
    #: Longest a tx waits for its outcome (the sequencer's answer, then its block applied here)
    #: before it is answered 21822 / HTTP 503 ("may still execute: look it up by hash"). Shorter
    #: frees clients sooner when the sequencer or this replica's stream stalls; too short turns a
    #: slow but healthy block (fsync under load) into an answer without a result.
    outcome_timeout_s: float = 5.0
    #: Overload door (admission.py): while the oldest tx on its way to the sequencer has waited
    #: longer than this (s), new txs are refused at once with 23000 / HTTP 429, before their
    #: signature check. Lower: admitted txs wait less, at the price of refusing more in bursts
    #: the queue would have absorbed. 0 = no door (txs wait up to ``outcome_timeout_s``).
    admission_max_delay_s: float = 0.25
    #: A replica joins the host's shared port once at most this many blocks behind the newest seq
    #: it knows of (after the boot and catch-up). Smaller: clients only ever meet fresh data, but
    #: a replica that trails by a few blocks under load waits longer before it takes traffic.
    join_lag_blocks: int = 16
    #: ... and leaves it when more than this many blocks behind (rejoining when caught up again).
    #: Smaller: stale answers end sooner, at the price of more leave/join churn in bursts. Must be
    #: at least ``join_lag_blocks`` (the gap between them damps flapping).
    leave_lag_blocks: int = 256
    #: How often the replica re-checks its lag to join the shared port (s); leaving is immediate.
    #: Shorter: a caught-up replica takes traffic sooner, for a few more wake-ups per second.
    port_check_interval_s: float = 0.1
    #: Request budgets (limits.py; answered 429 / 23000 RATE_LIMITED beyond). Weighted requests
    #: per IP per rolling minute, Lighter's weights (sendTx 6, apikeys 150, most reads 300):
    #: Lighter's premium tier is 24,000. Larger serves heavier clients per IP (NAT'd users share
    #: one), smaller sheds abusive ones sooner. 0 = no per-IP budget.
    rate_limit_weight_per_minute: int = 24_000
    #: Txs per account per rolling minute (counted once their dry-run passed). 0 = no limit.
    rate_limit_txs_per_account_per_minute: int = 6_000
    #: Open WebSocket connections per IP (Lighter: 100); beyond, error 30005 and the close.
    ws_max_connections_per_ip: int = 100
    #: Open HTTP connections (WebSocket ones included) per peer IP (http/gate.py); one more is
    #: answered 429 / 23000 and closed. Larger serves more clients behind one NAT; smaller bounds
    #: what one address can hold open (each connection is a file descriptor and its buffers).
    #: ``rate_limit_exempt`` addresses are not counted. 0 = no per-IP cap.
    http_max_connections_per_ip: int = 256
    #: Open HTTP connections in all; one more is answered 503 / 23000 and closed at once, so the
    #: process never runs out of file descriptors. 0 = the file limit (RLIMIT_NOFILE) less a
    #: reserve for the replica's own work (512, or an eighth of the limit when that is more).
    http_max_connections: int = 0
    #: Seconds a whole request head may take, counted from when the replica starts waiting for
    #: it (the connection's start, or the first byte after an answer), never reset by a byte:
    #: past it 408 and the close. Shorter frees the descriptors of trickling heads (slowloris)
    #: sooner; too short cuts clients on slow links.
    http_head_timeout_s: float = 10.0
    #: Addresses exempt from every budget and the WS cap: the host's own tools and loadtests.
    #: Behind a same-host reverse proxy every client is loopback: empty it there.
    rate_limit_exempt: tuple[str, ...] = ("127.0.0.1", "::1")
    #: Buckets kept per kind (IPs, accounts); the least recently used beyond are forgotten
    #: (they start full again). More remembers more abusers, at ~200 bytes each.
    rate_limit_max_keys: int = 100_000
    #: How long a request refused for its signature is answered from memory when replayed
    #: byte for byte (no signature check); 0 = off. Longer saves more CPU under replay floods;
    #: a key change makes such an answer stale for at most this long.
    rejection_cache_s: float = 10.0
    #: Remembered rejections at most (least recent forgotten first).
    rejection_cache_size: int = 10_000

    def __post_init__(self) -> None:
        if self.outcome_timeout_s <= 0:
            raise ValueError("outcome_timeout_s must be > 0")
        if not 0 <= self.join_lag_blocks <= self.leave_lag_blocks:
            raise ValueError("need 0 <= join_lag_blocks <= leave_lag_blocks")
        if not 0 <= self.admission_max_delay_s < self.outcome_timeout_s:
            raise ValueError("need 0 <= admission_max_delay_s < outcome_timeout_s")
        if self.auth_max_lifetime_s <= 0:
            raise ValueError("auth_max_lifetime_s must be > 0")
        if self.port_check_interval_s <= 0:
            raise ValueError("port_check_interval_s must be > 0")
        if self.http_max_connections < 0 or self.http_max_connections_per_ip < 0:
            raise ValueError("http_max_connections and http_max_connections_per_ip must be >= 0")
        if self.http_head_timeout_s <= 0:
            raise ValueError("http_head_timeout_s must be > 0")
