"""Dead-letter records read back (Kafka 4.4's __dlq.errors.* headers, both copy modes) and payloads
shown safely: text only when printable UTF-8, hex otherwise, always cut to a limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.dlq.records import REDRIVEN_FROM, parse, preview, redriven_headers

CONTEXT = [("__dlq.errors.topic", b"orders"), ("__dlq.errors.partition", b"3"), ("__dlq.errors.offset", b"42"),
           ("__dlq.errors.group", b"workers"), ("__dlq.errors.delivery.count", b"5"),
           ("__dlq.errors.message", b"Offset delivery count exceeded the threshold.")]


def test_a_copied_dead_letter_carries_the_source_record_and_its_context():
    d = parse("dlq.orders", 0, 7, 1000, b"k", b"v", [("trace", b"abc"), *CONTEXT])
    assert (d.source_topic, d.source_partition, d.source_offset) == ("orders", 3, 42)
    assert (d.group, d.delivery_count) == ("workers", 5)
    assert d.message == "Offset delivery count exceeded the threshold."
    assert d.context_complete and not d.headers_only
    assert d.user_headers == (("trace", b"abc"),)


def test_a_headers_only_dead_letter_is_recognised():
    d = parse("dlq.orders", 0, 7, 1000, None, None, CONTEXT)
    assert d.headers_only and d.context_complete
    assert parse("dlq.orders", 0, 7, 1000, b"", b"", CONTEXT).headers_only  # a writer that cannot send nulls
    assert not parse("dlq.orders", 0, 7, 1000, None, b"v", CONTEXT).headers_only


def test_missing_or_malformed_context_is_none_not_an_error():
    d = parse("dlq", 0, 1, 0, b"k", None, [("__dlq.errors.partition", b"x1"), ("__dlq.errors.offset", b"\xff")])
    assert d.source_partition is None and d.source_offset is None and d.source_topic is None
    assert not d.context_complete


def test_the_newest_context_wins_for_a_record_dead_lettered_twice():
    d = parse("dlq", 0, 1, 0, b"k", b"v", [*CONTEXT, ("__dlq.errors.offset", b"99")])
    assert d.source_offset == 99


def test_a_redriven_record_keeps_its_own_headers_not_the_context():
    d = parse("dlq.orders", 2, 7, 0, b"k", b"v", [("trace", b"abc"), (REDRIVEN_FROM, b"old"), *CONTEXT])
    assert redriven_headers(d) == [("trace", b"abc"), (REDRIVEN_FROM, b"dlq.orders/2/7")]
    assert redriven_headers(d, [("from-source", None)]) == [("from-source", None), (REDRIVEN_FROM, b"dlq.orders/2/7")]


def test_preview_text_hex_null_and_truncation():
    assert preview(None) == {"kind": "null", "text": "", "size": 0, "truncated": False}
    assert preview(b"hello\nworld")["kind"] == "text"
    assert preview(b"\x00\x01\xff") == {"kind": "hex", "text": "00 01 ff", "size": 3, "truncated": False}
    assert preview(b"\x1b[31mred")["kind"] == "hex"  # terminal escapes are not text
    big = preview(b"a" * 1000, limit=10)
    assert big == {"kind": "text", "text": "a" * 10, "size": 1000, "truncated": True}
    cut = preview("é".encode() * 10, limit=5)  # a character cut by the limit is dropped, not replaced
    assert cut["kind"] == "text" and cut["text"] == "éé" and cut["truncated"]


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_preview_never_shows_more_than_the_limit_and_text_is_printable(data, limit):
    p = preview(data, limit)
    assert p["size"] == len(data) and p["truncated"] == (len(data) > limit)
    if p["kind"] == "text":
        assert len(p["text"].encode()) <= limit
        assert all(ch.isprintable() or ch in "\n\t\r" for ch in p["text"])
    else:
        assert bytes.fromhex(p["text"].replace(" ", "")) == data[:limit]
