"""Bad inputs for the public REST and WebSocket surface, generated from a seed (the fuzz campaign).

Each generator returns one request: a REST call (method, path, query, body, headers) or a list
of WebSocket frames. Every one is *bad*: malformed, out of range, of the wrong type, too deep,
too big, in a wrong charset, a tx signed by the wrong key, an unknown path or channel, so the
answer must be a 4xx with a Lighter-style code (or, on the WebSocket, an error reply) and the
state must not change. Reads with random parameters may be valid by chance: those are marked
``may_succeed`` (a 200 is then fine, the state still must not change).

Deterministic for a seed: ``Campaign(seed).rest()`` / ``.ws()`` draw the next input.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from typing import Any

from raydex.actors.local import Trader
from raydex.codecs import generate_key, sign_tx, tx_to_json

READS = (
    "info",
    "orderBooks",
    "orderBookDetails",
    "orderBookOrders",
    "recentTrades",
    "assetDetails",
    "account",
    "apikeys",
    "nextNonce",
    "tx",
    "currentHeight",
    "block",
    "blocks",
    # the authenticated reads (issue 11): a random token or none is always refused
    "accountActiveOrders",
    "accountInactiveOrders",
    "accountOrders",
    "trades",
    "deposit/history",
    "withdraw/history",
    "transfer/history",
    "positionFunding",
    "liquidations",
    "pnl",
    "accountTxs",
    "accountLimits",
    "accountMetadata",
)
#: parameters of the authenticated reads; ``auth`` takes random text and token-shaped strings
PRIVATE_PARAMS = ("auth", "cursor", "client_order_indexes", "resolution", "sort_dir", "ask_filter")
PARAMS = (
    "market_id",
    "limit",
    "by",
    "value",
    "account_index",
    "api_key_index",
    "asset_id",
    "index",
)
CHANNELS = (
    "order_book",
    "trade",
    "account_all",
    "market_stats",
    "height",
    "ticker",
    "",
    "user_stats",
    "account_all_orders",
    "account_orders",
    "account_orders/0",
    "account_all_trades",
    "account_all_positions",
    "account_all_assets",
)
WS_TYPES = ("subscribe", "unsubscribe", "jsonapi/sendtx", "jsonapi/sendtxbatch", "ping", "")


@dataclass
class Rest:
    method: str
    path: str
    query: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    may_succeed: bool = False
    family: str = ""


@dataclass
class Ws:
    frames: list[str | bytes]
    family: str = ""


class Campaign:
    """Seeded generators of bad REST requests and bad WebSocket frames (see module doc)."""

    def __init__(self, seed: int, trader: Trader) -> None:
        self.rng = random.Random(seed)
        wrong_seed, _ = generate_key()
        # a CreateOrder of a funded account, signed by a key it does not have: any mutation
        # of it is still refused (never executes)
        tx = trader.order(299_000, 10, 0)
        trader.nonce -= 1
        self.template = tx_to_json(sign_tx(tx, wrong_seed))

    # ---- values ---------------------------------------------------------------------------------

    def scalar(self) -> Any:
        r = self.rng
        return r.choice(
            [
                None,
                True,
                False,
                r.randint(-(2**70), 2**70),
                r.choice([0, -1, 1, 2**31, 2**32, 2**48, 2**63, 2**64, 255, 256]),
                r.random() * 10 ** r.randint(-5, 30),
                float("inf") if r.random() < 0.5 else -0.0,
                self.text(),
            ]
        )

    def text(self, n: int = 24) -> str:
        r = self.rng
        pools = [
            string.printable,
            "0123456789-+.eE",
            "\u0000\u200b\ufeff\ud7ff\u00e9\u4e2d\U0001f600\\\"'{}[]/%",
        ]
        return "".join(r.choices(r.choice(pools), k=r.randint(0, n)))

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        roll = r.random()
        if depth > 3 or roll < 0.6:
            return self.scalar()
        if roll < 0.8:
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        return {self.text(8): self.value(depth + 1) for _ in range(r.randint(0, 4))}

    def deep(self) -> str:
        n = (
            self.rng.choice([33, 33, 100, 100, 1_000, 5_000])
            if self.rng.random() < 0.95
            else 50_000
        )
        opener, closer = self.rng.choice([("[", "]"), ('{"a":', "}")])
        return opener * n + "1" + closer * n

    def tx_info(self) -> str:
        """The template mutated: fields retyped, dropped, added, overflowed; or not JSON."""
        r = self.rng
        roll = r.random()
        if roll < 0.1:
            return self.text(200)
        if roll < 0.15:
            return self.deep()
        obj = dict(self.template)
        for key in r.sample(sorted(obj), r.randint(0, 4)):
            if r.random() < 0.7:
                obj[key] = self.value()
            else:
                obj.pop(key)
        if r.random() < 0.3:
            obj[self.text(10)] = self.value()
        text = json.dumps(obj)
        if r.random() < 0.1:  # a cut, a flipped character
            cut = r.randint(0, len(text))
            text = text[:cut] + r.choice(["", "\x00", "}", '"', "\\"]) + text[cut + 1 :]
        return text

    def tx_type(self) -> Any:
        r = self.rng
        return r.choice(
            [14, "14", 15, 8, 1, 3, 23, 0, -1, 2**40, "1e3", "", " 14", "x", None, [14], 14.0]
        )

    # ---- REST -----------------------------------------------------------------------------------

    def rest(self) -> Rest:
        r = self.rng
        family = r.choice(
            ["read", "read", "path", "method", "send_tx", "send_tx", "batch", "body", "body"]
        )
        return getattr(self, f"_rest_{family}")()

    def _query(self) -> list[tuple[str, str]]:
        r = self.rng
        out = []
        for _ in range(r.randint(0, 4)):
            name = r.choice(PARAMS + PRIVATE_PARAMS) if r.random() < 0.8 else self.text(6)
            v = self.scalar()
            out.append((name, v if isinstance(v, str) else json.dumps(v)))
        return out

    def _rest_read(self) -> Rest:
        path = "/api/v1/" + self.rng.choice(READS)
        return Rest("GET", path, self._query(), may_succeed=True, family="read")

    def _rest_path(self) -> Rest:
        r = self.rng
        tail = r.choice(
            [
                self.text(12).replace("?", "").replace("#", ""),
                "../" * r.randint(1, 5) + "etc/passwd",
                "%00",
                "a" * r.randint(100, 3000),
                r.choice(READS).upper(),
                r.choice(READS) + "/" + self.text(4),
            ]
        )
        # a random path may normalise onto a real read ("", "x/.."): a 200 is fine then
        return Rest("GET", "/api/v1/" + tail, self._query(), may_succeed=True, family="path")

    def _rest_method(self) -> Rest:
        r = self.rng
        method = r.choice(["PUT", "DELETE", "PATCH", "POST"])
        path = "/api/v1/" + (r.choice(READS) if method == "POST" else r.choice(["sendTx", "info"]))
        return Rest(method, path, body=b"x=1", family="method")

    def _form(self, fields: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        from urllib.parse import urlencode

        r = self.rng
        pairs = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in fields.items()]
        if r.random() < 0.5:
            body = json.dumps(dict(fields)).encode()
            return body, {"Content-Type": "application/json"}
        text = urlencode(pairs)
        return text.encode(), {"Content-Type": "application/x-www-form-urlencoded"}

    def _rest_send_tx(self) -> Rest:
        r = self.rng
        fields: dict[str, Any] = {}
        if r.random() < 0.9:
            fields["tx_type"] = self.tx_type()
        if r.random() < 0.9:
            fields["tx_info"] = self.tx_info() if r.random() < 0.9 else self.value()
        if r.random() < 0.2:
            fields[self.text(6)] = self.value()
        body, headers = self._form(fields)
        return Rest("POST", "/api/v1/sendTx", body=body, headers=headers, family="send_tx")

    def _rest_batch(self) -> Rest:
        r = self.rng
        n = r.choice([0, 1, 2, 5, 51, 200])
        distinct = [self.tx_info() for _ in range(min(n, 5))] or [""]
        types: Any = [self.tx_type() for _ in range(n)]
        infos: Any = [distinct[i % len(distinct)] for i in range(n if r.random() < 0.8 else n + 1)]
        if r.random() < 0.2:
            types = self.value()
        if r.random() < 0.1:
            infos = self.deep()
        fields = {
            "tx_types": types if isinstance(types, str) else json.dumps(types),
            "tx_infos": infos if isinstance(infos, str) else json.dumps(infos),
        }
        body, headers = self._form(fields)
        return Rest("POST", "/api/v1/sendTxBatch", body=body, headers=headers, family="batch")

    def _rest_body(self) -> Rest:
        r = self.rng
        path = "/api/v1/" + r.choice(["sendTx", "sendTxBatch"])
        kinds = ["deep", "charset", "multipart", "garbage", "json_types"]
        kind = r.choice(kinds) if r.random() < 0.97 else "big"
        headers = {"Content-Type": "application/json"}
        if kind == "deep":
            body = self.deep().encode()
        elif kind == "charset":
            enc = r.choice(["utf-7", "klingon", "utf-32", "latin-1", "x" * 40])
            headers = {"Content-Type": f"application/x-www-form-urlencoded; charset={enc}"}
            body = "tx_type=14&tx_info=\u00e9\u4e2d".encode("utf-8", "surrogatepass")
        elif kind == "multipart":
            boundary = "".join(r.choice(string.ascii_letters + "-'()+_,./:=?") for _ in range(9))
            headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
            body = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="tx_type"\r\n\r\n14'
            ).encode("utf-8", "surrogatepass") + bytes(r.randrange(256) for _ in range(40))
        elif kind == "garbage":
            headers = {"Content-Type": r.choice(["application/json", "text/plain", ""])}
            body = bytes(r.randrange(256) for _ in range(r.randint(0, 400)))
        elif kind == "big":
            body = b'{"tx_type": 14, "tx_info": "' + b"a" * (300 * 1024) + b'"}'
        else:
            body = json.dumps(self.value()).encode()
        return Rest("POST", path, body=body, headers=headers, family="body")

    # ---- WebSocket ------------------------------------------------------------------------------

    def ws(self) -> Ws:
        """A few bad frames for one connection; each must get exactly one reply."""
        return Ws([self.ws_frame() for _ in range(self.rng.randint(1, 12))], family="ws")

    def _channel(self) -> Any:
        r = self.rng
        roll = r.random()
        if roll < 0.3:
            return self.scalar()
        kind = r.choice(CHANNELS)
        arg = r.choice(
            [
                str(r.choice([254, 255, 999, 2**40, 10**16])),
                "-1",
                "",
                "all",
                self.text(5),
                "0" * 70,
                "\u0661",
            ]
        )
        sep = r.choice(["/", ":", "//", ""])
        return f"{kind}{sep}{arg}"

    def ws_frame(self) -> str | bytes:
        r = self.rng
        roll = r.random()
        if roll < 0.08:
            return bytes(r.randrange(256) for _ in range(r.randint(1, 30)))
        if roll < 0.16:
            return self.text(60)
        if roll < 0.2:
            return self.deep()
        if roll < 0.3:
            return json.dumps(self.value())
        kind = r.choice(WS_TYPES) if r.random() < 0.9 else self.text(8)
        msg: dict[str, Any] = {"type": kind}
        if kind in ("subscribe", "unsubscribe"):
            if r.random() < 0.9:
                msg["channel"] = self._channel()
            if r.random() < 0.3:  # a bad auth token: never valid here
                msg["auth"] = r.choice(
                    [self.scalar(), self.text(20), f"{2**40}:1:0:{'ab' * 80}", "1:1:1:" + "0" * 160]
                )
        elif kind.startswith("jsonapi/"):
            if r.random() < 0.1:
                msg["data"] = self.value()
            elif kind == "jsonapi/sendtx":
                msg["data"] = {"tx_type": self.tx_type(), "tx_info": self.tx_info()}
            else:
                n = r.choice([0, 1, 3, 51])
                distinct = [self.tx_info() for _ in range(min(n, 3))] or [""]
                msg["data"] = {
                    "tx_types": json.dumps([self.tx_type() for _ in range(n)]),
                    "tx_infos": json.dumps([distinct[i % len(distinct)] for i in range(n)]),
                }
            if r.random() < 0.5:
                msg["id"] = self.scalar()
        elif kind == "ping":
            msg["type"] = "ping " if r.random() < 0.5 else "PING"
        for _ in range(r.randint(0, 2)):
            msg[self.text(5)] = self.value()
        return json.dumps(msg)
