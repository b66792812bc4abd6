"""The nemesis checker (kshare_sidecar.testing.nemesis) on made-up histories: quiet on a good one,
and each rule failing on a history made to break it — the checker can fail."""

from __future__ import annotations

from kshare_sidecar.testing.nemesis import Ack, Delivery, History, Snapshot, Tenure, check, tenures_from

T0 = 1_000.0


def history(deliveries, acks, *, ends=None, tenures=None, snapshots=None, **kw) -> History:
    return History(ends=ends if ends is not None else {0: 2}, deliveries=deliveries, acks=acks, home={0: 3},
                   tenures=tenures if tenures is not None else {3: [Tenure(1, 1, T0 - 100)]},
                   snapshots=snapshots if snapshots is not None else {0: [Snapshot(1, T0 + 50, 2, 0, 1)]},
                   lock_s=15.0, limit=5, **kw)


def good() -> tuple[list[Delivery], list[Ack]]:
    ds = [Delivery("a", 0, 0, 1, T0, node=1), Delivery("b", 0, 1, 1, T0 + 1, node=1)]
    acks = [Ack("a", 0, 0, 1, True, T0 + 0.5), Ack("b", 0, 1, 1, True, T0 + 1.5)]
    return ds, acks


def rules(report) -> set[str]:
    return {v.split(":")[0] for v in report.violations}


def test_a_good_history_passes():
    report = check(history(*good()))
    assert report.ok, report.text()
    assert report.stats["accepted"] == 2 and report.stats["records"] == 2


def test_lost_and_accepted_twice():
    ds, acks = good()
    assert rules(check(history(ds, acks[:1]))) == {"lost"}
    assert rules(check(history(ds, acks + [Ack("c", 0, 1, 2, True, T0 + 30)]))) == {"accepted twice"}
    # at the delivery limit: archived, as Kafka does, not lost
    limit = [Delivery("a", 0, 1, n, T0 + 20 * n) for n in range(1, 6)]
    assert check(history(ds[:1] + limit, acks[:1])).ok
    # an acknowledgement whose outcome the client could not know, never redelivered, done by the state topic
    unknown = [Ack("b", 0, 1, 1, False, T0 + 1.5, "REQUEST_TIMED_OUT")]
    assert check(history(ds, acks[:1] + unknown)).stats["ack_outcome_unknown_but_done"] == 1
    # ... but not when the state topic says it is not done
    assert "lost" in rules(check(history(ds, acks[:1] + unknown, snapshots={0: [Snapshot(1, T0, 1, 0, 1)]})))


def test_held_twice_unless_the_lock_ran_out_or_the_owner_changed():
    ds = [Delivery("a", 0, 0, 1, T0), Delivery("b", 0, 0, 2, T0 + 5)]
    acks = [Ack("b", 0, 0, 2, True, T0 + 6)]
    assert rules(check(history(ds, acks, ends={0: 1}, snapshots={}))) == {"held twice"}
    later = [Delivery("a", 0, 0, 1, T0), Delivery("b", 0, 0, 2, T0 + 16)]  # the 15 s lock ran out
    assert check(history(later, [Ack("b", 0, 0, 2, True, T0 + 17)], ends={0: 1}, snapshots={})).ok
    failed = [Ack("a", 0, 0, 1, False, T0 + 2, "INVALID_RECORD_STATE")]  # a's delivery ended with its ack
    assert check(history(ds, failed + acks, ends={0: 1}, snapshots={})).ok
    moved = {3: [Tenure(1, 1, T0 - 100, T0 + 3), Tenure(2, 2, T0 + 3)]}  # a new owner voids the old locks
    report = check(history(ds, acks, ends={0: 1}, snapshots={}, tenures=moved))
    assert report.ok and report.stats["voided_by_owner_change"] == 1


def test_delivery_counts_never_go_down_and_repeat_only_across_an_unplanned_owner_change():
    acks = [Ack("b", 0, 0, 1, True, T0 + 40)]
    down = [Delivery("a", 0, 0, 3, T0), Delivery("b", 0, 0, 2, T0 + 20)]
    assert rules(check(history(down, acks, ends={0: 1}, snapshots={}))) == {"count went down"}
    same = [Delivery("a", 0, 0, 1, T0), Delivery("b", 0, 0, 1, T0 + 20)]
    assert rules(check(history(same, acks, ends={0: 1}, snapshots={}))) == {"count repeated without an unplanned owner change"}
    crash = {3: [Tenure(1, 1, T0 - 100, T0 + 10), Tenure(2, 2, T0 + 10)]}
    assert check(history(same, acks, ends={0: 1}, snapshots={}, tenures=crash)).ok
    planned = {3: [Tenure(1, 1, T0 - 100, T0 + 9, planned=True), Tenure(2, 2, T0 + 10)]}
    assert "count repeated without an unplanned owner change" in rules(
        check(history(same, acks, ends={0: 1}, snapshots={}, tenures=planned)))


def test_a_zombie_is_a_delivery_by_a_sidecar_outside_its_tenure():
    tenures = {3: [Tenure(1, 1, T0 - 100, T0 + 10), Tenure(2, 2, T0 + 10)]}
    ds = [Delivery("a", 0, 0, 1, T0 + 20, node=1)]
    acks = [Ack("a", 0, 0, 1, True, T0 + 21)]
    assert rules(check(history(ds, acks, ends={0: 1}, snapshots={}, tenures=tenures))) == {"zombie"}
    ds = [Delivery("a", 0, 0, 1, T0 + 20, node=2)]
    assert check(history(ds, acks, ends={0: 1}, snapshots={}, tenures=tenures)).ok


def test_a_delivery_stamped_just_after_a_short_tenure_is_no_zombie():
    """The client stamps a delivery when its poll returns it, up to the tolerance after the sidecar
    handed it out: a tenure shorter than the tolerance that ended just before the stamp (a planned
    handover 0.7 s after a takeover, seen by the nemesis) covered the hand-out."""
    tenures = {3: [Tenure(1, 3, T0 - 100, T0 - 0.7), Tenure(2, 2, T0 - 0.7, T0 - 0.003, planned=True),
                   Tenure(3, 3, T0 + 1)]}
    ds = [Delivery("a", 0, 0, 1, T0, node=2)]
    acks = [Ack("a", 0, 0, 1, True, T0 + 2)]
    assert "zombie" not in rules(check(history(ds, acks, ends={0: 1}, snapshots={}, tenures=tenures)))
    ds = [Delivery("a", 0, 0, 1, T0 + 1.5, node=2)]  # past the tolerance: a zombie
    assert "zombie" in rules(check(history(ds, acks, ends={0: 1}, snapshots={}, tenures=tenures)))


def test_spso_back_unserved_and_died():
    ds, acks = good()
    back = {0: [Snapshot(1, T0, 2, 0, 1), Snapshot(2, T0 + 1, 1, 0, 1), Snapshot(3, T0 + 2, 2, 0, 1)]}
    assert rules(check(history(ds, acks, snapshots=back))) == {"SPSO went back"}
    many = [Delivery("a", 0, o, 1, T0 + o) for o in range(3)] + [Delivery("a", 0, 3, 1, T0 + 40)]
    acks = [Ack("a", 0, o, 1, True, d.t + 0.1) for o, d in enumerate(many)]
    report = check(history(many, acks, ends={0: 4}, heals=[("a cut", T0 + 5)],
                           snapshots={0: [Snapshot(1, T0 + 50, 4, 0, 1)]}))
    assert rules(report) == {"unserved"} and report.stats["worst_unserved_after_heal_s"] == 35.0
    assert rules(check(history(*good(), exits={"s1": None, "s2": -9}))) == {"died"}


def test_tenures_come_from_owner_records_in_log_order():
    assert tenures_from([(1.0, 1, 1, False), (2.0, 1, 1, True), (3.0, 2, 2, False), (5.0, 3, 1, False)]) == [
        Tenure(1, 1, 1.0, 2.0, planned=True), Tenure(2, 2, 3.0, 5.0), Tenure(3, 1, 5.0)]


def test_a_reload_from_the_state_topic_excuses_nothing_and_a_single_sidecar_has_no_tenures_by_node():
    """A sidecar that reloads a share-partition keeps its locks and counts (share/reload_memory.py):
    a record handed out again under a live lock, or with its count repeated, fails with or without
    a reload between."""
    acks = [Ack("b", 0, 0, 1, True, T0 + 40)]
    same = [Delivery("a", 0, 0, 1, T0), Delivery("a", 0, 0, 1, T0 + 5)]
    assert rules(check(history(same, acks, ends={0: 1}, snapshots={}))) == {"held twice", "count repeated without an unplanned owner change"}
    report = check(history(same, acks, ends={0: 1}, snapshots={}, reloads={0: [T0 + 2]}))
    assert rules(report) == {"held twice", "count repeated without an unplanned owner change"} and report.stats["reloads"] == 1
    single = {3: [Tenure(1, None, T0 - 100)]}  # a single sidecar's owner records name no node
    ds = [Delivery("a", 0, 0, 1, T0, node=1)]
    assert check(history(ds, [Ack("a", 0, 0, 1, True, T0 + 1)], ends={0: 1}, snapshots={}, tenures=single)).ok


def test_a_client_that_died_is_reported_and_what_it_held_is_judged_by_the_state_topic():
    """A consumer that stopped before the end of the run is a violation of its own; the records it
    was handed last and never logged an outcome for (it may have sent the acknowledgement before it
    died) count as done when the state topic has them done and nobody got them again."""
    ds, acks = good()
    died = {"b": T0 + 1}
    report = check(history(ds, acks[:1], gone=died))
    assert rules(report) == {"client died"} and report.stats["ack_outcome_unknown_but_done"] == 1
    # ... lost when the state topic does not have it done
    not_done = {0: [Snapshot(1, T0 + 50, 1, 0, 1)]}
    assert rules(check(history(ds, acks[:1], gone=died, snapshots=not_done))) >= {"client died", "lost"}
    # ... and a live client's missing acknowledgement is still a lost record
    assert rules(check(history(ds, acks[:1]))) == {"lost"}


def test_a_record_handed_out_before_a_stall_is_judged_at_its_hand_out_not_at_its_poll():
    """A consumer stalled 20 s in a commit on an unreachable sidecar hands its buffered records to
    the application after the stall: the asyncio client knows when the ShareFetch answer came
    (``lo``/``hi``), librdkafka only that it came after the previous poll (``lo``)."""
    tenures = {3: [Tenure(1, 1, T0 - 100, T0 + 10), Tenure(2, 2, T0 + 10)]}
    acks = [Ack("a", 0, 0, 1, True, T0 + 31)]
    # node 1 handed it out at T0 + 2, inside its tenure; the poll returned it at T0 + 30
    stalled = [Delivery("a", 0, 0, 1, T0 + 30, node=1, lo=T0 + 2, hi=T0 + 2)]
    assert check(history(stalled, acks, ends={0: 1}, snapshots={}, tenures=tenures)).ok
    late = [Delivery("a", 0, 0, 1, T0 + 30, node=1, lo=T0 + 20, hi=T0 + 20)]  # it came after the takeover
    assert rules(check(history(late, acks, ends={0: 1}, snapshots={}, tenures=tenures))) == {"zombie"}
    # the same count from the new owner first, then from the stalled consumer's buffer: the old
    # owner's hand-out may precede the unplanned takeover at T0 + 10
    same = [Delivery("b", 0, 0, 1, T0 + 29), Delivery("a", 0, 0, 1, T0 + 30, lo=T0 + 5)]
    acks = [Ack("b", 0, 0, 1, True, T0 + 31)]
    assert check(history(same, acks, ends={0: 1}, snapshots={}, tenures=tenures)).ok
    known = [Delivery("b", 0, 0, 1, T0 + 29), Delivery("a", 0, 0, 1, T0 + 30, lo=T0 + 28)]
    assert rules(check(history(known, acks, ends={0: 1}, snapshots={}, tenures=tenures))) == {
        "count repeated without an unplanned owner change"}


def test_a_hand_out_known_only_to_precede_its_answer_is_never_judged_after_it():
    """Without the ShareFetch's send time (``lo``) the hand-out is bounded by the answer (``hi``)
    alone: the window of a stalled consumer's record must not start at its poll, after ``hi``."""
    tenures = {3: [Tenure(1, 1, T0 - 100, T0 + 10), Tenure(2, 2, T0 + 10)]}
    stalled = Delivery("a", 0, 0, 1, T0 + 30, node=1, hi=T0 + 2)
    assert stalled.earliest == stalled.latest == T0 + 2
    assert check(history([stalled], [Ack("a", 0, 0, 1, True, T0 + 31)], ends={0: 1}, snapshots={},
                         tenures=tenures)).ok


def test_a_record_handed_out_after_its_acceptance_was_answered_fails():
    """The run of a backend broker isolated: a record accepted without error came back (to the same
    consumer, count 1). A copy the sidecar may have handed out before the answer is not judged."""
    ds = [Delivery("a", 0, 0, 1, T0, lo=T0 - 0.2, hi=T0 - 0.1), Delivery("a", 0, 0, 2, T0 + 40, lo=T0 + 39, hi=T0 + 39.5)]
    acks = [Ack("a", 0, 0, 1, True, T0 + 0.05)]
    assert rules(check(history(ds, acks, ends={0: 1}, snapshots={}))) == {"delivered after accepted"}
    early = [ds[0], Delivery("a", 0, 0, 2, T0 + 0.5, lo=T0 - 0.05, hi=T0 + 0.02)]  # sent before the answer
    assert "delivered after accepted" not in rules(check(history(early, acks, ends={0: 1}, snapshots={})))
