"""How big a backend read is: the free window room plus two windows when reading at the
window's end (the cut trailing batch is then a small part of each read), only the re-available
records behind it otherwise, never the client's whole MaxBytes."""

from __future__ import annotations

import uuid

from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.share.log_reader import _EXTRA_WINDOWS, _FIRST_READ, _MIN_READ, _Budget, _read_size
from kshare_sidecar.share.cache import Slot
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.partition import SharePartition

CLIENT_MAX = 52_428_800


def _slot(bytes_per_record: float = 1100.0, start: int = 0) -> Slot:
    key = SharePartitionKey("g", str(uuid.uuid4()), 0)
    sp = SharePartition(ShareConfig(max_record_locks=2_000), lambda: 0, start_offset=start)
    slot = Slot(key, "t", sp)
    slot.bytes_per_record = bytes_per_record
    return slot


def test_first_read_is_bounded_without_a_size_sample():
    assert _read_size(_slot(0.0), 0, _Budget(500, CLIENT_MAX)) == _FIRST_READ


def test_read_at_the_window_end_covers_the_room_and_two_more_windows():
    slot = _slot()
    size = _read_size(slot, 0, _Budget(500, CLIENT_MAX))
    room = int(2_000 * 1100 * 1.25)
    assert size == room + int(_EXTRA_WINDOWS * 2_000 * 1100)
    assert size < CLIENT_MAX // 4  # never sized by the client's MaxBytes


def test_the_window_part_is_bounded_by_the_client_budget_the_extra_is_not():
    slot = _slot()
    size = _read_size(slot, 0, _Budget(10, 100_000))
    assert size == 100_000 + int(_EXTRA_WINDOWS * 2_000 * 1100)


def test_tiny_records_still_read_a_useful_chunk():
    assert _read_size(_slot(bytes_per_record=1.0), 0, _Budget(500, CLIENT_MAX)) == _MIN_READ


def test_reads_are_sized_in_whole_batches_of_the_size_seen():
    """A read of about one batch asks for one byte (Kafka returns the first batch whole: nothing
    cut and read again); a longer one for whole batches and an eighth; no sample, no change."""
    from kshare_sidecar.share.log_reader import _in_whole_batches

    assert _in_whole_batches(800_000, 0.0) == 800_000
    assert _in_whole_batches(700_000, 500_000.0) == 1  # 1.4 batches: one, whole
    assert _in_whole_batches(800_000, 500_000.0) == 2 * 500_000 + 62_500  # 1.6: two
    assert _in_whole_batches(200_000, 500_000.0) == 1  # less than a batch: Kafka returns one anyway
    assert _in_whole_batches(7_500_000, 1_000_000.0) == 8 * 1_000_000 + 125_000
    assert _in_whole_batches(65_536, 150.0) == 437 * 150 + 18
