"""The per-share-partition batch cache: serves offsets inside the cached batches, bounded in bytes."""

from kshare_sidecar.backend.types import BatchInfo, FetchResult
from kshare_sidecar.share.read_cache import BatchCache


def result(first: int, last: int, size: int) -> FetchResult:
    return FetchResult(records=b"x" * size, batches=(BatchInfo(first, last, -1, False, False, 0, size),),
                       high_watermark=last + 1, last_stable_offset=last + 1, log_start_offset=0)


def test_hit_only_inside_cached_batches_and_per_isolation():
    cache = BatchCache(1000)
    cache.put(("topic-id-a", 0), 0, result(10, 19, 100))
    assert cache.get(("topic-id-a", 0), 15, 0) is not None
    assert cache.get(("topic-id-a", 0), 20, 0) is None and cache.get(("topic-id-a", 0), 9, 0) is None
    assert cache.get(("topic-id-a", 0), 15, 1) is None  # read_committed reads are cached apart
    assert cache.get(("topic-id-b", 0), 15, 0) is None  # a recreated topic has another id
    assert (cache.hits, cache.misses) == (1, 4)


def test_bounded_by_bytes_least_recently_used_first():
    cache = BatchCache(250)
    for p in range(3):
        cache.put(("t", p), 0, result(0, 9, 100))
    assert cache.bytes <= 250
    assert cache.get(("t", 0), 5, 0) is None  # the oldest entry was evicted
    assert cache.get(("t", 2), 5, 0) is not None
    cache.drop(("t", 2))
    assert cache.get(("t", 2), 5, 0) is None and cache.bytes == 100


def test_oversized_and_empty_results_are_not_cached():
    cache = BatchCache(50)
    cache.put(("t", 0), 0, result(0, 9, 100))
    assert cache.bytes == 0 and cache.get(("t", 0), 1, 0) is None


def test_a_read_ahead_is_promoted_when_the_window_reaches_it():
    cache = BatchCache(1000)
    cache.put(("t", 0), 0, result(0, 9, 100))
    cache.put(("t", 0), 0, result(10, 19, 100), ahead=True)
    assert cache.has_ahead(("t", 0), 0) and len(cache) == 1 and cache.bytes == 200
    assert cache.get(("t", 0), 5, 0).batches[0].base_offset == 0  # the current read still serves its offsets
    got = cache.get(("t", 0), 12, 0)
    assert got is not None and got.batches[0].base_offset == 10 and cache.ahead_hits == 1
    assert not cache.has_ahead(("t", 0), 0) and cache.bytes == 100  # promoted: it replaced the current read
    assert cache.get(("t", 0), 5, 0) is None


def test_read_aheads_share_the_byte_budget_and_are_dropped_with_their_partition():
    cache = BatchCache(250)
    cache.put(("t", 0), 0, result(0, 9, 100))
    cache.put(("t", 0), 0, result(10, 19, 100), ahead=True)
    cache.put(("t", 1), 0, result(0, 9, 100))
    assert cache.bytes <= 250 and len(cache) == 2
    cache.drop(("t", 0))
    assert len(cache) == 1 and not cache.has_ahead(("t", 0), 0)
