"""Markup is escaped by construction: whatever a record, a header or a group id holds reaches the
page as text, never as an element or an attribute; pictures are drawn from plain numbers."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.console import pages
from kshare_sidecar.console.html import Html, esc, tag
from kshare_sidecar.console.pages_dlq import payload
from kshare_sidecar.console.svg import histogram, sparkline, strip
from kshare_sidecar.dlq.records import preview

HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "' onmouseover='alert(1)",
           "</textarea><svg onload=alert(1)>", "javascript:alert(1)"]


@pytest.mark.parametrize("text", HOSTILE)
def test_text_and_attributes_are_escaped(text):
    out = tag("td", text, title=text, data_value=text)
    assert "<script" not in out and "<img" not in out and "<svg" not in out
    assert out.count('"') == 4  # two attributes, their own quotes only
    assert esc(text) in out


class _Parsed(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list]] = []
        self.text = ""

    def handle_starttag(self, name, attrs):
        self.tags.append((name, attrs))

    def handle_data(self, data):
        self.text += data


@given(st.text(max_size=80))
def test_any_text_stays_one_text_node_and_one_attribute_value(text):
    parsed = _Parsed()
    parsed.feed(tag("span", text, title=text))
    parsed.close()
    assert parsed.tags == [("span", [("title", text)])]
    assert parsed.text == text


def test_event_handlers_scripts_and_foreign_urls_cannot_be_made():
    with pytest.raises(ValueError):
        tag("a", "x", onclick="alert(1)")
    with pytest.raises(ValueError):
        tag("script", "alert(1)")
    with pytest.raises(ValueError):
        tag("a", "x", href="javascript:alert(1)")
    with pytest.raises(ValueError):
        tag("a", "x", href="//evil.example/")
    assert tag("a", "x", href="/group?id=%3Cb%3E") == '<a href="/group?id=%3Cb%3E">x</a>'


def test_a_hostile_payload_is_shown_as_text_and_binary_as_hex():
    shown = payload(preview(HOSTILE[1].encode()))
    assert "<img" not in shown and "&lt;img" in shown
    assert "de ad be ef" in payload(preview(b"\xde\xad\xbe\xef"))
    assert "(5,000 bytes)" in payload(preview(b"x" * 5000, 16))


def test_a_whole_page_escapes_a_hostile_group_id():
    row = {"group_id": HOSTILE[0], "state": "Stable", "members": 1, "assigned_partitions": 1, "lag": 0,
           "records_in_flight": 3, "oldest_acquisition_age_ms": 10, "oldest_in_flight_age_s": 0.0,
           "dead_lettered_total": 0, "delivery_rate": 1.0, "redelivery_rate": 0.0}
    ctx = pages.PageContext(HOSTILE[1], "tok", True, 1, "/api/groups")
    page = pages.groups_page([row], {}, ctx)
    assert isinstance(page, Html)
    assert "<script>alert" not in page and "<img" not in page
    assert page.count("<script") == 1  # the console's own, from /static


def test_pictures():
    assert "polyline" in sparkline([1, 2, None, 4])
    assert "polyline" not in sparkline([None, 5])  # one point draws no line
    s = strip([(10, 10, "acquired"), (11, 19, "available")], 10, 20, width=100)
    assert s.count("<rect") == 2 and 'class="k-acquired"' in s and 'width="10.00"' in s
    h = histogram({0: 4, 1: 2, 5: 1}, 5)
    assert h.count("<rect") == 6 and 'class="bar limit"' in h


def test_the_group_summary_names_dead_letters_archived_unwritten():
    d = {"state": "Stable", "group_epoch": 3, "coordinator": 1, "coordinated_here": True, "members": 1,
         "assigned_partitions": 2, "lag": 0, "records_in_flight": 0, "oldest_acquisition_age_ms": 0,
         "oldest_in_flight_age_s": 0.0, "delivered_total": 100, "redelivered_total": 4, "dead_lettered_total": 7,
         "dead_letter_topic": "dlq.orders", "dead_letters_unwritten_total": 0}
    assert "archived unwritten" not in pages._summary(d)
    shown = pages._summary({**d, "dead_letters_unwritten_total": 7})
    assert "archived unwritten" in shown and 'data-field="archived_unwritten">7<' in shown
