"""Java's ``HashMap``/``HashSet`` iteration order, so that a port of a Kafka assignor decides alike.

Kafka's share-group ``SimpleAssignor`` revokes "the first" partitions of an overfilled member and
hands out partitions "in order" — and that order is the iteration order of Java hash
collections. To compute the same assignment for the same input, the port iterates the same way:

* a key's bucket is ``spread(hashCode) & (capacity - 1)`` with ``spread(h) = h ^ (h >>> 16)``;
  iteration goes bucket by bucket, and inside a bucket in list order (``put`` appends,
  ``computeIfAbsent`` prepends; a resize keeps the relative order);
* the capacity is a power of two: 16 for ``new HashMap<>()``, ``tableSizeFor(n)`` for
  ``new HashMap<>(n)``, doubled whenever the size exceeds 0.75 × capacity;
* the hash codes are Java's: ``String`` (31-polynomial over UTF-16 code units), ``Integer``
  (the value), ``Uuid`` (``(int)(h >> 32) ^ (int) h`` for ``h = msb ^ lsb``) and the record
  ``TopicIdPartition(Uuid, int)`` (``31 * uuidHash + partition``).

Tree bins (eight or more keys in one bucket of a table of 64+) are not modelled; they do not
occur at share-group sizes. Pure, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")

_MASK32 = 0xFFFFFFFF
_MAX_CAPACITY = 1 << 30


def int32(x: int) -> int:
    x &= _MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return int32(h)


def _signed64(x: int) -> int:
    return x - (1 << 64) if x & (1 << 63) else x


def uuid_hash(u: uuid.UUID | str) -> int:
    if isinstance(u, uuid.UUID):
        value = u.int
    else:
        try:
            value = uuid.UUID(u).int
        except ValueError:  # plugin tests name topics freely; Kafka ids are always Uuids
            return string_hash(u)
    h = _signed64(value >> 64) ^ _signed64(value & ((1 << 64) - 1))
    return int32((h >> 32) ^ int32(h))


def topic_partition_hash(topic_id: uuid.UUID | str, partition: int) -> int:
    """``org.apache.kafka.server.common.TopicIdPartition`` is a record: 31 * h(topicId) + h(partition)."""
    return int32(31 * uuid_hash(topic_id) + partition)


def spread(h: int) -> int:
    h &= _MASK32
    return h ^ (h >> 16)


def table_size_for(cap: int) -> int:
    n = 1
    while n < cap:
        n <<= 1
    return min(n, _MAX_CAPACITY)


def expected_size_capacity(n: int) -> int:
    """Kafka's ``AssignorHelpers.newHashMap(n)`` / ``newHashSet(n)`` initial capacity argument."""
    return int(((n + 1) / 0.75) + 1)


class JavaHashMap(Generic[K, V]):
    """A dict that iterates like ``java.util.HashMap`` with the given key hash function.

    Buckets are real lists, because Java's order inside a bucket is not insertion order:
    ``put`` appends to the bucket's tail and grows the table *after* inserting past the
    threshold, while ``computeIfAbsent`` grows it *before* (when already past) and links the new
    key at the bucket's *head*. A resize splits each bucket keeping relative order.
    """

    def __init__(self, hash_fn: Callable[[K], int], initial_capacity: int | None = None) -> None:
        self._hash = hash_fn
        # new HashMap<>() allocates 16 on first use; new HashMap<>(n) allocates tableSizeFor(n)
        self._initial = 16 if initial_capacity is None else table_size_for(initial_capacity)
        self._table: list[list[K]] | None = None
        self._values: dict[K, V] = {}

    @property
    def capacity(self) -> int:
        return self._initial if self._table is None else len(self._table)

    def _threshold(self) -> int:
        return int(len(self._table) * 0.75) if self._table is not None else 0

    def _bucket(self, key: K, n: int) -> int:
        return spread(self._hash(key)) & (n - 1)

    def _resize(self) -> None:
        if self._table is None:
            self._table = [[] for _ in range(self._initial)]
            return
        old = self._table
        n = min(len(old) * 2, _MAX_CAPACITY)
        table: list[list[K]] = [[] for _ in range(n)]
        for bucket in old:
            for key in bucket:
                table[self._bucket(key, n)].append(key)
        self._table = table

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __getitem__(self, key: K) -> V:
        return self._values[key]

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        return self._values.get(key, default)

    def put(self, key: K, value: V) -> None:
        if self._table is None:
            self._resize()
        if key not in self._values:
            assert self._table is not None
            self._table[self._bucket(key, len(self._table))].append(key)
            self._values[key] = value
            if len(self._values) > self._threshold():
                self._resize()
        self._values[key] = value

    __setitem__ = put

    def compute_if_absent(self, key: K, factory: Callable[[], V]) -> V:
        if key in self._values:
            return self._values[key]
        if self._table is None or len(self._values) > self._threshold():
            self._resize()
        assert self._table is not None
        value = factory()
        self._table[self._bucket(key, len(self._table))].insert(0, key)
        self._values[key] = value
        return value

    def remove(self, key: K) -> bool:
        if key not in self._values:
            return False
        del self._values[key]
        assert self._table is not None
        self._table[self._bucket(key, len(self._table))].remove(key)
        return True

    def keys(self) -> list[K]:
        return [] if self._table is None else [k for bucket in self._table for k in bucket]

    def items(self) -> list[tuple[K, V]]:
        return [(k, self._values[k]) for k in self.keys()]

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


class JavaHashSet(Generic[K]):
    """A set that iterates like ``java.util.HashSet`` (a HashMap's key set)."""

    def __init__(self, hash_fn: Callable[[K], int], initial_capacity: int | None = None,
                 items: Iterable[K] = ()) -> None:
        self._map: JavaHashMap[K, None] = JavaHashMap(hash_fn, initial_capacity)
        for item in items:
            self.add(item)

    @classmethod
    def of(cls, hash_fn: Callable[[K], int], items: Iterable[K]) -> JavaHashSet[K]:
        """``new HashSet<>(collection)``: capacity max(n / .75 + 1, 16)."""
        listed = list(items)
        return cls(hash_fn, max(int(len(listed) / 0.75) + 1, 16), listed)

    def add(self, item: K) -> bool:
        if item in self._map:
            return False
        self._map.put(item, None)
        return True

    def remove(self, item: K) -> bool:
        return self._map.remove(item)

    def __contains__(self, item: object) -> bool:
        return item in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[K]:
        return iter(self._map.keys())

    def copy(self) -> JavaHashSet[K]:
        """``new HashSet<>(this)``."""
        return JavaHashSet.of(self._map._hash, list(self))


def int_hash(i: int) -> int:
    return int32(i)
