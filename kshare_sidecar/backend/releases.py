"""Which Apache Kafka release a backend is, as far as its ApiVersions answer tells.

Why: a broker does not say its version on the wire, but every release raises the highest version
of some APIs, so the highest versions of a few of them pin the release down — exactly for the
releases measured here, as "between X and Y" for those in between. The start-up check
(:mod:`.compat`) names the release this way in its one line, so an operator reads "Kafka 2.4"
rather than a list of API numbers.

:data:`FINGERPRINTS` holds the highest versions each release the harness runs answers (measured
from the brokers themselves, 2026-11-29; ``tests/unit/log/test_releases.py`` checks them against the
recorded ApiVersions of every release, and the backend matrix against the live brokers). Only APIs
that every broker of a release offers whatever its configuration are used: no controller or
ZooKeeper-only APIs, nothing behind a feature flag (consumer, share and streams groups).
"""

from __future__ import annotations

from collections.abc import Mapping

#: API keys whose highest version tells releases apart: Produce, Fetch, ListOffsets, Metadata,
#: OffsetCommit, FindCoordinator, ApiVersions, InitProducerId, AddPartitionsToTxn, DescribeCluster.
MARKERS = (0, 1, 2, 3, 8, 10, 18, 22, 24, 60)

#: release -> highest version of each marker API (absent: the release does not have the API).
FINGERPRINTS: dict[str, dict[int, int]] = {
    "2.4": {0: 8, 1: 11, 2: 5, 3: 9, 8: 8, 10: 3, 18: 3, 22: 2, 24: 1},
    "2.8": {0: 9, 1: 12, 2: 6, 3: 11, 8: 8, 10: 3, 18: 3, 22: 4, 24: 3, 60: 0},
    "3.5": {0: 9, 1: 15, 2: 8, 3: 12, 8: 8, 10: 4, 18: 3, 22: 4, 24: 3, 60: 0},
    "3.7": {0: 10, 1: 16, 2: 8, 3: 12, 8: 9, 10: 4, 18: 3, 22: 4, 24: 4, 60: 1},
    "3.9": {0: 11, 1: 17, 2: 9, 3: 12, 8: 9, 10: 6, 18: 4, 22: 5, 24: 5, 60: 1},
    "4.0": {0: 12, 1: 17, 2: 10, 3: 13, 8: 9, 10: 6, 18: 4, 22: 5, 24: 5, 60: 2},
    "4.1": {0: 13, 1: 18, 2: 10, 3: 13, 8: 9, 10: 6, 18: 4, 22: 5, 24: 5, 60: 2},
    "4.3": {0: 13, 1: 18, 2: 11, 3: 13, 8: 10, 10: 6, 18: 4, 22: 5, 24: 5, 60: 2},
    "4.4": {0: 13, 1: 18, 2: 11, 3: 13, 8: 10, 10: 6, 18: 5, 22: 5, 24: 5, 60: 2},
}

#: Older releases, by the one API each brought that kshare cares about (Kafka's upgrade notes):
#: the idempotent producer (KIP-98, 0.11).
_OLDER = (("0.11", 22, 0),)

#: Versions as (lowest, highest) per API key, as an ApiVersions answer lists them.
Versions = Mapping[int, tuple[int, int]]


def _meets(versions: Versions, fingerprint: Mapping[int, int]) -> bool:
    return all(api in versions and versions[api][1] >= top for api, top in fingerprint.items())


def release(versions: Versions) -> str:
    """The release ``versions`` (an ApiVersions answer) shows: ``"Kafka 3.9"`` for an exact match,
    ``"between Kafka 3.5 and 3.7"``, ``"Kafka 4.4 or newer"``, ``"between Kafka 0.11 and 2.4"``,
    ``"older than Kafka 0.11"``. A broker that is not Apache Kafka gets the Kafka releases its
    answer falls between."""
    names = list(FINGERPRINTS)
    met = [name for name in names if _meets(versions, FINGERPRINTS[name])]
    if met:
        newest = met[-1]
        shown = {api: versions[api][1] for api in FINGERPRINTS[newest]}
        after = names[names.index(newest) + 1:]
        if shown == FINGERPRINTS[newest] and not any(api in versions for api in MARKERS if api not in shown):
            return f"Kafka {newest}"
        return f"between Kafka {newest} and {after[0]}" if after else f"Kafka {newest} or newer"
    upper = names[0]
    for name, api, version in _OLDER:
        if api in versions and versions[api][1] >= version:
            return f"between Kafka {name} and {upper}"
        upper = name
    return f"older than Kafka {upper}"


def metadata_mode(versions: Versions, finalized: Mapping[str, int]) -> str | None:
    """``"ZooKeeper"`` when the broker lists ZooKeeper-mode inter-broker APIs (LeaderAndIsr),
    ``"KRaft"`` when it finalizes ``metadata.version`` (KRaft only), else None (not Kafka, or
    too old to say)."""
    if 4 in versions:
        return "ZooKeeper"
    if "metadata.version" in finalized:
        return "KRaft"
    return None
