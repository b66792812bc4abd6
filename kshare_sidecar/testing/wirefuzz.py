"""Request frames for fuzzing: structure-aware, mutated and random (pure; shared by the hypothesis
test in the default suite and the opt-in ``make fuzz`` run against a live sidecar).

Structure-aware frames are encoded straight from the walk plans in :mod:`kshare_sidecar.wire.prescan`
(so they follow kio's schemas without asking kio to encode anything), with values chosen to reach
deep into the handlers: known topic ids, small group ids, boundary integers, nulls where the
schema allows them and, sometimes, where it does not. Mutations then break lengths, counts,
varints and bytes of such frames; random frames keep only a served (api key, version) prefix.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Sequence

from kio.static.protocol import RequestPayload

from ..protocol.varint import uvarint
from ..wire import codec
from ..wire.prescan import _K_BYTES, _K_ENTITY, _K_FIXED, _K_STRING, _Field, _Plan, plan_for

#: (api key, min, max) of the requests the sidecar serves; ``served_ranges`` may override.
DEFAULT_SERVED: tuple[tuple[int, int, int], ...] = (
    (0, 3, 9), (1, 4, 12), (2, 1, 10), (3, 0, 13), (10, 0, 6), (16, 0, 5), (18, 0, 4), (32, 1, 4),
    (42, 0, 2), (44, 0, 1), (76, 1, 1), (77, 1, 1), (78, 1, 2), (79, 1, 2), (90, 0, 1), (91, 0, 0),
    (92, 0, 0),
)

_INTS = {1: (0, 1, -1, 127, -128), 2: (0, 1, -1, 32767, -32768), 4: (0, 1, -1, 2**31 - 1, -2**31, 500, 30000),
         8: (0, 1, -1, 2**63 - 1, -2**63, 10, 1000), 16: ()}
_FMT = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}
_STRINGS = ("", "g", "grp", "orders", "events", "m" * 36, "m" * 37, "\u00e9t\u00e9", "x" * 300)


class FrameFactory:
    """``structured()``, ``mutated()``, ``random_frame()``: request frame payloads (no size prefix)."""

    def __init__(self, rng: random.Random, *, topic_ids: Sequence[uuid.UUID] = (),
                 served: Sequence[tuple[int, int, int]] = DEFAULT_SERVED, null_rate: float = 0.05) -> None:
        self.rng = rng
        self.topic_ids = list(topic_ids)
        self.served = list(served)
        self.null_rate = null_rate

    # -- frames ------------------------------------------------------------------------------
    def pick_api(self) -> tuple[int, int]:
        key, lo, hi = self.rng.choice(self.served)
        return key, self.rng.randint(lo, hi)

    def structured(self, api: tuple[int, int] | None = None) -> bytes:
        key, version = api or self.pick_api()
        cls: type[RequestPayload] = codec.request_class(key, version)
        head = struct.pack(">hhi", key, version, self.rng.randint(0, 2**31 - 1))
        header_cls: type = cls.__header_schema__  # plan_for is cached by class
        header = plan_for(header_cls)
        client = self.rng.choice((b"fuzz", b"", None))
        head += struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
        if header.flexible:
            head += b"\x00"
        return head + self._entity(plan_for(cls), depth=0)

    def mutated(self, base: bytes | None = None) -> bytes:
        data = bytearray(base if base is not None else self.structured())
        for _ in range(self.rng.randint(1, 4)):
            self._mutate(data)
        if len(data) < 8:
            data += bytes(8 - len(data))
        return bytes(data)

    def random_frame(self) -> bytes:
        key, version = self.pick_api()
        body = self.rng.randbytes(self.rng.randint(0, 64))
        return struct.pack(">hhi", key, version, self.rng.randint(0, 2**31 - 1)) + body

    def any_frame(self) -> bytes:
        r = self.rng.random()
        if r < 0.45:
            return self.structured()
        if r < 0.9:
            return self.mutated()
        return self.random_frame()

    # -- encoding from a plan ----------------------------------------------------------------
    def _entity(self, plan: _Plan, depth: int) -> bytes:
        out = b"".join(self._field(f, plan.flexible, depth) for f in plan.fields)
        if plan.flexible:
            out += b"\x00"  # no tagged fields (mutations add odd ones)
        return out

    def _field(self, f: _Field, flexible: bool, depth: int) -> bytes:
        flexible = flexible and not f.legacy
        if not f.array:
            return self._value(f, flexible, depth, nullable=f.nullable)
        if self.rng.random() < (self.null_rate if f.nullable else self.null_rate / 10):
            return b"\x00" if flexible else struct.pack(">i", -1)
        n = 0 if depth > 3 else self.rng.choice((0, 1, 1, 2, 3))
        head = uvarint(n + 1) if flexible else struct.pack(">i", n)
        return head + b"".join(self._value(f, flexible, depth + 1, nullable=False) for _ in range(n))

    def _value(self, f: _Field, flexible: bool, depth: int, *, nullable: bool) -> bytes:
        rng = self.rng
        if f.kind == _K_FIXED:
            if f.size == 16:
                choice = rng.random()
                if choice < 0.2 or not self.topic_ids:
                    return bytes(16) if choice < 0.1 else rng.randbytes(16)
                return rng.choice(self.topic_ids).bytes
            if f.boolean:
                return bytes((rng.random() < 0.5,))
            if rng.random() < 0.7:
                value = rng.choice(_INTS[f.size])
            else:
                bits = f.size * 8
                value = rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            return struct.pack(_FMT[f.size], value)
        if f.kind == _K_ENTITY:
            assert f.entity is not None
            if nullable:
                if rng.random() < self.null_rate:
                    return b"\xff"
                return b"\x01" + self._entity(f.entity, depth + 1)
            return self._entity(f.entity, depth + 1)
        if rng.random() < (self.null_rate if nullable else self.null_rate / 10):
            return b"\x00" if flexible else struct.pack(">h" if f.kind == _K_STRING else ">i", -1)
        if f.kind == _K_STRING:
            data = rng.choice(_STRINGS).encode() if rng.random() < 0.99 else b"\xff\xfe"
        else:
            data = rng.randbytes(rng.randint(0, 40))
        if flexible:
            return uvarint(len(data) + 1) + data
        return struct.pack(">h" if f.kind == _K_STRING else ">i", len(data)) + data

    # -- mutations ---------------------------------------------------------------------------
    def _mutate(self, data: bytearray) -> None:
        rng = self.rng
        if not data:
            data += rng.randbytes(8)
            return
        i = rng.randrange(len(data))
        op = rng.randrange(9)
        if op == 0:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[i] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE))
        elif op == 2:  # a huge legacy count/length
            data[i:i + 4] = rng.choice((b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x00\x01\x00\x00"))
        elif op == 3:  # a huge compact count/length (varint)
            data[i:i + 1] = uvarint(rng.choice((2**32 - 1, 2**31, 2**35 - 1, 2**28, 70000)))
        elif op == 4:
            del data[i:i + rng.randint(1, 8)]
        elif op == 5:
            data[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 6:
            del data[rng.randint(8, max(8, len(data))):]
        elif op == 7:
            data[i:i + 2] = b"\xff\xff"
        else:
            j = rng.randrange(len(data))
            data[i:i] = data[j:j + rng.randint(1, 16)]
