"""The console's pages as HTML, drawn from the views of model.py (the same data as their JSON).

Every value goes through :mod:`.html` (escaped by construction); the only script is
/static/console.js (refresh of <main>, confirmation of destructive forms).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from .html import Html, raw, tag
from .svg import KIND_LABELS, KINDS, histogram, sparkline, strip


@dataclass
class PageContext:
    principal: str
    csrf: str
    actions: bool
    node_id: int
    json_url: str
    flash: list[tuple[str, str]] = field(default_factory=list)
    refresh_ms: int = 5000


def url(path: str, **query: object) -> str:
    q = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(q) if q else "")


def _num(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}{unit}"
    return f"{v:,}{unit}"


def age(ms: float | None) -> str:
    if not ms:
        return "-"
    s = ms / 1000
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def document(title: str, main: Html, ctx: PageContext) -> Html:
    """A whole page; with ``main`` alone the refresh script swaps it in place."""
    nav = tag("nav", tag("a", "Share groups", href="/"), tag("a", "Dead letters", href="/deadletters"),
              tag("a", "Redrives", href="/redrives"), tag("a", "JSON", href=ctx.json_url, class_="json"))
    who = tag("span", f"{ctx.principal} · node {ctx.node_id} · actions {'on' if ctx.actions else 'off'}",
              class_="who")
    pause = tag("button", "pause refresh", type="button", id="pause", class_="pause", aria_pressed="false")
    head = tag("head", raw('<meta charset="utf-8">'), tag("title", f"kshare · {title}"),
               raw('<meta name="viewport" content="width=device-width, initial-scale=1">'),
               raw('<link rel="stylesheet" href="/static/console.css">'),
               raw('<script src="/static/console.js" defer></script>'))
    body = tag("body", tag("header", tag("strong", "kshare"), nav, pause, who),
               tag("main", main_content(title, main, ctx), id="main", data_refresh=ctx.refresh_ms))
    return Html("<!doctype html>" + tag("html", head, body, lang="en"))


def main_content(title: str, main: Html, ctx: PageContext) -> Html:
    flashes = [tag("p", line, class_=f"flash {kind}", role="status") for kind, line in ctx.flash]
    return Html(tag("h1", title) + "".join(flashes) + main)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, class_: str = "") -> Html:
    return tag("table", tag("thead", tag("tr", *(tag("th", h) for h in headers))),
               tag("tbody", *(tag("tr", *(tag("td", c) for c in row)) for row in rows)), class_=class_ or None)


def _form(action: str, ctx: PageContext, *fields: object, button: str, confirm: str | None = None,
          danger: bool = False) -> Html:
    return tag("form", tag("input", type="hidden", name="csrf", value=ctx.csrf), *fields,
               tag("button", button, type="submit", class_="danger" if danger else None),
               method="post", action=action, data_confirm=confirm, class_="action")


def _field(label: str, control: Html) -> Html:
    return tag("label", tag("span", label), control)


# -- share groups ------------------------------------------------------------------------------
def groups_page(rows: list[dict[str, Any]], history: dict[str, list[dict[str, Any]]], ctx: PageContext) -> Html:
    if not rows:
        return document("Share groups", tag("p", "No share group on this sidecar yet.", class_="empty"), ctx)
    out = []
    for r in rows:
        h = history.get(r["group_id"], [])
        out.append([tag("a", r["group_id"], href=url("/group", id=r["group_id"])), r["state"] or "-",
                    r["members"], r["assigned_partitions"], _num(r["lag"]), tag("span", r["records_in_flight"],
                                                                               data_field="records_in_flight"),
                    age(r["oldest_acquisition_age_ms"]), age(r["oldest_in_flight_age_s"] * 1000),
                    _num(r.get("delivery_rate"), "/s"), _num(r.get("redelivery_rate"), "/s"),
                    tag("span", r["dead_lettered_total"], data_field="dead_lettered_total"),
                    sparkline([s["records_in_flight"] for s in h], label="records in flight"),
                    sparkline([s["delivery_rate"] for s in h], label="deliveries/s")])
    headers = ["group", "state", "members", "assigned partitions", "lag", "in flight", "oldest acquisition",
               "oldest in flight", "deliveries", "redeliveries", "dead-lettered", "in flight (10 min)",
               "deliveries/s (10 min)"]
    return document("Share groups", table(headers, out, class_="groups"), ctx)


# -- one group ---------------------------------------------------------------------------------
def _summary(d: dict[str, Any]) -> Html:
    items = [("state", d["state"] or "-"), ("group epoch", d["group_epoch"]), ("assignor", d.get("assignor") or "-"),
             ("coordinator", f"node {d['coordinator']}" + (" (this sidecar)" if d["coordinated_here"] else "")),
             ("members", d.get("member_count", d["members"])), ("assigned partitions", d["assigned_partitions"]), ("lag", _num(d["lag"])),
             ("records in flight", d["records_in_flight"]),
             ("oldest acquisition", age(d["oldest_acquisition_age_ms"])),
             ("oldest in flight", age(d["oldest_in_flight_age_s"] * 1000)),
             ("deliveries", f"{d['delivered_total']:,} ({_num(d.get('delivery_rate'), '/s')})"),
             ("redeliveries", f"{d['redelivered_total']:,} ({_num(d.get('redelivery_rate'), '/s')})"),
             ("dead-lettered", d["dead_lettered_total"]), ("dead-letter topic", d["dead_letter_topic"] or "none")]
    if d.get("dead_letters_unwritten_total"):  # records gone from the queue and not in the topic: the log says why
        items.append(("archived unwritten", d["dead_letters_unwritten_total"]))
    return tag("dl", *(Html(tag("dt", k) + tag("dd", v, data_field=k.replace(" ", "_"))) for k, v in items),
               class_="summary")


def _plots(history: list[dict[str, Any]]) -> Html:
    names = {"records_in_flight": "records in flight", "lag": "lag", "delivery_rate": "deliveries/s",
             "redelivery_rate": "redeliveries/s", "dead_letter_rate": "dead letters/s"}
    return tag("div", *(tag("figure", sparkline([s[k] for s in history], width=200, height=40, label=label),
                             tag("figcaption", label)) for k, label in names.items()), class_="plots")


def _legend() -> Html:
    return tag("ul", *(tag("li", tag("span", "", class_=f"swatch k-{k}"), KIND_LABELS[k]) for k in KINDS),
               class_="legend")


def _partition(p: dict[str, Any]) -> Html:
    counts = p["counts"]
    facts = (f"SPSO {p['spso']:,} · SPEO {p['speo']:,} · window {p['window']:,} · high watermark "
             f"{_num(p['high_watermark'])} · lag {_num(p['lag'])} · in flight {p['records_in_flight']:,} · oldest "
             f"acquisition {age(p['oldest_acquisition_age_ms'])}")
    count_line = " · ".join(f"{KIND_LABELS[k]} {counts[k]:,}" for k in KINDS if counts[k])
    nearest = table(["offsets", "delivery count", "deliveries left", "state", "member", "lock ends in"],
                    [[f"{r['first']}" if r["first"] == r["last"] else f"{r['first']}-{r['last']}",
                      r["delivery_count"], r["left"], KIND_LABELS[r["state"]], r["member"] or "-",
                      age(r["lock_remaining_ms"])] for r in p["nearest_limit"]], class_="nearest") \
        if p["nearest_limit"] else tag("p", "No record delivered yet in the window.", class_="empty")
    hist = {int(k): v for k, v in p["histogram"].items()}
    return tag("section",
               tag("h3", f"{p['topic']}-{p['partition']}"),
               tag("p", facts, class_="facts"),
               strip([tuple(s) for s in p["strip"]], p["spso"], max(p["end_offset"], p["spso"] + 1)),
               tag("p", count_line or "empty window", class_="counts"),
               tag("div", tag("figure", histogram(hist, p["delivery_count_limit"]),
                              tag("figcaption", f"records by delivery count (limit {p['delivery_count_limit']})")),
                   tag("div", tag("h4", "Nearest their delivery limit"), nearest), class_="row"),
               class_="partition", data_partition=f"{p['topic']}-{p['partition']}")


def group_page(d: dict[str, Any], ctx: PageContext, *, topics: list[str]) -> Html:
    g = d["group_id"]
    parts = [_summary(d), _plots(d["history"])]
    members = table(["member", "client id", "host", "epoch", "assignment"],
                    [[m["member_id"], m["client_id"], m["client_host"], m["member_epoch"],
                      "; ".join(f"{t}: {', '.join(map(str, ps))}" for t, ps in sorted(m["assignment"].items())) or "-"]
                     for m in d["members"]]) if d["members"] else tag("p", "No members.", class_="empty")
    parts += [tag("h2", "Members"), members, tag("h2", "Share-partitions led by this sidecar"), _legend()]
    parts += [_partition(p) for p in d["partitions"]] or [tag("p", "None loaded here.", class_="empty")]
    if d["not_loaded"]:
        parts += [tag("h2", "Other share-partitions (from the state)"),
                  table(["topic", "partition", "start offset", "lag", "led by"],
                        [[o["topic"], o["partition"], _num(o["start_offset"]), _num(o["lag"]), f"node {o['leader']}"]
                         for o in d["not_loaded"]])]
    if d.get("offsets_error"):
        parts.append(tag("p", d["offsets_error"], class_="flash error"))
    if ctx.actions:
        parts.append(_actions(g, d, ctx, topics))
    parts.append(tag("p", tag("a", "dead letters of this group", href=url("/deadletters", topic=d["dead_letter_topic"],
                                                                            group=g)) if d["dead_letter_topic"] else ""))
    return document(f"Share group {g}", Html("".join(parts)), ctx)


def _actions(g: str, d: dict[str, Any], ctx: PageContext, topics: list[str]) -> Html:
    reset = _form("/actions/reset", ctx, tag("input", type="hidden", name="group", value=g),
                  _field("topic", tag("select", tag("option", "all topics", value=""),
                                      *(tag("option", t, value=t) for t in topics), name="topic")),
                  _field("to", tag("select", *(tag("option", o, value=o) for o in ("earliest", "latest", "offset")),
                                   name="to")),
                  _field("offset", tag("input", type="number", name="offset", min="0")),
                  button="Reset start offset", confirm=f"Reset the start offset of share group {g}? In-flight "
                  "state and delivery counts are discarded.")
    delete = _form("/actions/delete", ctx, tag("input", type="hidden", name="group", value=g),
                   button="Delete group", danger=True, confirm=f"Delete share group {g} and all its state?")
    redrive = _form("/actions/redrive", ctx, tag("input", type="hidden", name="group", value=g),
                    _field("dead-letter topic", tag("input", type="text", name="dlq_topic",
                                                    value=d["dead_letter_topic"], required=True)),
                    _field("to topic", tag("input", type="text", name="target", placeholder="(each record's source)")),
                    _field("records/s", tag("input", type="number", name="rate", min="1", value="100")),
                    _field("skip missing", tag("input", type="checkbox", name="skip_missing", value="1")),
                    button="Redrive dead letters", confirm=f"Copy the dead letters of {g} back to their topic?")
    return tag("section", tag("h2", "Actions"), tag("p", "Reset and delete need a group without members.",
                                                    class_="hint"), reset, redrive, delete, class_="actions")
