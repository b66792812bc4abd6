"""The rule of the Faust driver (kshare_sidecar.faust.acking): no Faust, no broker."""

import pytest

from kshare_sidecar.client import AcknowledgeType
from kshare_sidecar.faust.acking import EventOutcome, decide, parse_options


def test_processed_event_is_accepted():
    assert decide(EventOutcome(1, entered=True)) is AcknowledgeType.ACCEPT
    assert decide(EventOutcome(4, entered=True), reject_after=3) is AcknowledgeType.ACCEPT


def test_agent_raised_releases_for_redelivery():
    assert decide(EventOutcome(1, entered=True, failed=True)) is AcknowledgeType.RELEASE
    # no reject_after: always RELEASE, the broker archives at its delivery count limit
    assert decide(EventOutcome(99, entered=True, failed=True)) is AcknowledgeType.RELEASE


def test_reject_from_the_nth_failing_delivery():
    assert decide(EventOutcome(2, entered=True, failed=True), reject_after=3) is AcknowledgeType.RELEASE
    assert decide(EventOutcome(3, entered=True, failed=True), reject_after=3) is AcknowledgeType.REJECT
    assert decide(EventOutcome(5, entered=True, failed=True), reject_after=3) is AcknowledgeType.REJECT


def test_event_faust_skipped_unseen_is_released_not_accepted():
    # acked by Faust without entering a stream (flow control suspended): accepting would lose it
    assert decide(EventOutcome(1, entered=False)) is AcknowledgeType.RELEASE


def test_url_options():
    assert parse_options({}) == {}
    assert parse_options({"reject_after": "3", "max_share_version": "1",
                          "share_acquire_mode": "record_limit"}) == {
        "reject_after": 3, "max_share_version": 1, "share_acquire_mode": "record_limit"}
    with pytest.raises(ValueError, match="unknown kshare transport option 'group'"):
        parse_options({"group": "x"})
    with pytest.raises(ValueError, match="not a int"):
        parse_options({"reject_after": "many"})
    with pytest.raises(ValueError, match=">= 0"):
        parse_options({"reject_after": "-1"})
