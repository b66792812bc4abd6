"""Worked examples of ExtendedSharePartition (docs/extensions.md), one rule each."""

from __future__ import annotations

from kshare_sidecar.persist.model import DeliveryState
from kshare_sidecar.share.engine.config import Extensions, ShareConfig
from kshare_sidecar.share.engine.extended import ExtendedSharePartition
from kshare_sidecar.share.engine.holds import BACKOFF, DEAD_LETTER

ACCEPT, RELEASE, REJECT = 1, 2, 3
WALL0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def wall(self) -> int:
        return WALL0 + self.now


def batch(first: int, last: int) -> tuple:
    return (first, last, -1, False, False)


def make(clock: Clock, **ext) -> ExtendedSharePartition:
    cfg = ShareConfig(record_lock_duration_ms=1000, delivery_count_limit=3, max_record_locks=100,
                      throttle_redelivery=False)
    return ExtendedSharePartition(cfg, clock, ext=Extensions(**ext), wall=clock.wall, start_offset=0)


def test_backing_off_records_count_against_the_in_flight_cap():
    clock = Clock()
    sp = make(clock, backoff_ms=500)
    assert sp.acquire("m", [batch(0, 99)], 100)[0].last_offset == 99
    assert sp.acknowledge("m", [(0, 99, [RELEASE])]).name == "none"
    assert sp.in_flight == 100 and not sp.can_acquire() and sp.next_fetch_offset() is None
    assert {m for *_x, m, _d in sp.ranges()} == {BACKOFF}
    clock.now = 499
    assert sp.expire() == 0 and sp.next_fetch_offset() is None
    clock.now = 500
    assert sp.expire() == 100 and sp.next_fetch_offset() == 0
    [again] = sp.acquire("m2", [batch(0, 99)], 100, fetch_offset=0)
    assert (again.first_offset, again.last_offset, again.delivery_count) == (0, 99, 2)


def test_backoff_grows_per_delivery_and_is_capped():
    clock = Clock()
    sp = make(clock, backoff_ms=100, backoff_multiplier=3.0, backoff_max_ms=250)
    waits = []
    for _ in range(2):
        sp.acquire("m", [batch(0, 0)], 1, fetch_offset=0)
        sp.acknowledge("m", [(0, 0, [RELEASE])])
        released_at = clock.now
        while next(sp.ranges())[2] != DeliveryState.AVAILABLE:
            clock.now += 1
            sp.expire()
        waits.append(clock.now - released_at)
    assert waits == [100, 250]  # 100, then min(300, 250)


def test_lock_expiry_and_member_leaving_back_off_too():
    clock = Clock()
    sp = make(clock, backoff_ms=400)
    sp.acquire("m", [batch(0, 9)], 5, mode=1)
    sp.acquire("n", [batch(0, 9)], 5, mode=1, fetch_offset=5)
    sp.release_member("n")
    assert {(f, last): (m, d) for f, last, _s, _c, m, d in sp.ranges()}[(5, 9)] == (BACKOFF, 400)
    clock.now = 1000
    sp.expire()
    held = {(f, last): (m, d) for f, last, _s, _c, m, d in sp.ranges()}
    assert held == {(0, 4): (BACKOFF, 1400), (5, 9): (None, None)}  # n's backoff ended at 400


def test_rejected_and_limit_records_are_held_for_the_dead_letter_writer():
    clock = Clock()
    sp = make(clock, dead_letter=True)
    sp.acquire("m", [batch(0, 9)], 10)
    sp.acknowledge("m", [(0, 1, [REJECT]), (2, 9, [RELEASE])])
    for _ in range(2):  # deliveries 2 and 3 of offsets 2..9, released again
        sp.acquire("m", [batch(0, 9)], 10, fetch_offset=sp.next_fetch_offset())
        sp.acknowledge("m", [(2, 9, [RELEASE])])
    assert sp.dead_letter_pending() == [(0, 1, 1, "r"), (2, 9, 3, "l")]
    assert sp.spso == 0, "nothing archived before the dead-letter write"
    snap = sp.snapshot()
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count, b.dead_letter)
            for b in snap.state_batches] == [(0, 1, DeliveryState.AVAILABLE, 1, "r"),
                                             (2, 9, DeliveryState.AVAILABLE, 3, "l")]
    assert sp.acknowledge("m", [(0, 0, [ACCEPT])]).name == "invalid_record_state", "consumers cannot touch them"
    assert sp.acknowledge(DEAD_LETTER, [(0, 9, [REJECT])]).name == "none"
    assert sp.spso == 10 and sp.dead_letter_pending() == []


def test_restore_keeps_a_backoff_by_the_wall_clock_and_pending_dead_letters():
    clock = Clock()
    sp = make(clock, backoff_ms=10_000, dead_letter=True)
    sp.acquire("m", [batch(0, 3)], 4)
    sp.acknowledge("m", [(0, 1, [RELEASE]), (2, 2, [REJECT]), (3, 3, [ACCEPT])])
    snap = sp.snapshot()
    later = Clock()
    later.now = 50_000  # a fresh process: its monotonic clock starts anywhere
    shift = 4_000  # wall time moved on 4 s while the sidecar was down

    def wall() -> int:
        return WALL0 + shift + later.now - 50_000

    back = ExtendedSharePartition.restore_with(snap, later, sp.config, sp.ext, wall)
    held = {(f, last): (m, d) for f, last, _s, _c, m, d in back.ranges() if m}
    assert held[(0, 1)] == (BACKOFF, 50_000 + 6_000), "the rest of the backoff, by the wall clock"
    assert held[(2, 2)][0] == DEAD_LETTER and back.dead_letter_pending() == [(2, 2, 1, "r")]


def test_key_order_holds_records_behind_their_key_and_releases_them_in_order():
    clock = Clock()
    sp = make(clock, key_ordering=True)
    keys = {0: b"a", 1: b"b", 2: b"a", 3: None, 4: b"a"}.get
    got = sp.order_by_key("m", sp.acquire("m", [batch(0, 4)], 10), keys)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(0, 1, 1), (3, 3, 1)]
    assert sp.next_fetch_offset() == 5, "2 and 4 wait, with their delivery taken back"
    sp.acknowledge("m", [(0, 0, [ACCEPT])])
    assert sp.next_fetch_offset() == 2
    got = sp.order_by_key("n", sp.acquire("n", [batch(0, 4)], 10, fetch_offset=2), keys)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(2, 2, 1)]
    sp.acknowledge("n", [(2, 2, [RELEASE])])  # a failed head keeps its key waiting...
    assert sp.next_fetch_offset() == 2
    got = sp.order_by_key("m", sp.acquire("m", [batch(0, 4)], 10, fetch_offset=2), keys)
    assert [(a.first_offset, a.delivery_count) for a in got] == [(2, 2)]
    sp.acknowledge("m", [(2, 2, [REJECT])])  # ...until it is done
    assert sp.next_fetch_offset() == 4


def test_key_order_spreads_the_heads_over_the_members_fetching():
    """With many keys one acquisition would hand one member every free key's head; each member
    takes its share (keys with work ÷ members that acquired lately), the rest stay available."""
    clock = Clock()
    sp = make(clock, key_ordering=True)
    keys = {o: b"k%d" % (o % 8) for o in range(16)}.get  # 8 keys, two records each
    first = sp.order_by_key("m", sp.acquire("m", [batch(0, 15)], 16), keys)
    assert [(a.first_offset, a.last_offset) for a in first] == [(0, 7)], "alone, it takes every head"
    assert sp.spared == 0
    sp.acknowledge("m", [(0, 7, [RELEASE])])  # the heads again, now with a second member fetching
    theirs = sp.order_by_key("n", sp.acquire("n", [batch(0, 15)], 16, fetch_offset=0), keys)
    assert [(a.first_offset, a.last_offset) for a in theirs] == [(0, 3)], "8 keys, 2 members: 4 heads each"
    assert sp.spared == 4 and sp.next_fetch_offset() == 4, "the other 4 heads are available at once"
    mine = sp.order_by_key("m", sp.acquire("m", [batch(0, 15)], 16, fetch_offset=4), keys)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in mine] == [(4, 7, 2)], \
        "their delivery was taken back when they were spared: this is their second"
    sp.acknowledge("m", [(4, 7, [ACCEPT])])
    clock.now += 31_000  # n stops fetching; its heads expire, and after a lock duration m has them all
    sp.expire(clock.now)
    got = sp.order_by_key("m", sp.acquire("m", [batch(0, 15)], 16, fetch_offset=sp.next_fetch_offset()), keys)
    assert sorted(o for a in got for o in range(a.first_offset, a.last_offset + 1)) == [0, 1, 2, 3, 12, 13, 14, 15]


def test_holds_restored_without_their_keys_are_learned_before_ordering_and_then_not_walked_again():
    clock = Clock()
    sp = make(clock, key_ordering=True, backoff_ms=500)
    keys = {o: b"k" for o in range(4)}.get
    sp.order_by_key("m", sp.acquire("m", [batch(0, 3)], 4), keys)  # 0 goes out, 1-3 wait for key k
    assert sp.unindexed_holds() == [] and sp.holds_indexed, "holds made while ordering know their keys"
    sp.acknowledge("m", [(0, 0, [RELEASE])])  # 0 backs off
    back = ExtendedSharePartition.restore_with(sp.snapshot(), clock, sp.config, sp.ext, clock.wall)
    assert not back.holds_indexed and back.unindexed_holds() == [(0, 0)], "the backoff hold came back keyless"
    back.key_index.learn(0, b"k")
    assert back.unindexed_holds() == [] and back.holds_indexed
