"""The dead-letter and redrive pages (see pages.py for the layout they share).

A payload is never interpreted: :func:`kshare_sidecar.dlq.records.preview` makes it text (when it
is printable UTF-8) or hex, cut to a limit, and :mod:`.html` escapes what is shown.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .html import Html, tag
from .pages import PageContext, _field, _form, document, table, url


def _when(ms: int | None) -> str:
    if not ms or ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def payload(p: dict[str, Any]) -> Html:
    """A preview (dlq.records.preview) as a code element: text, or hex, and how much was cut."""
    if p["kind"] == "null":
        return tag("span", "null", class_="null")
    more = f" … ({p['size']:,} bytes)" if p["truncated"] else ""
    return tag("code", p["text"], tag("span", more, class_="cut") if more else None, class_=f"payload {p['kind']}")


def _headers(headers: list[dict[str, Any]]) -> Html:
    if not headers:
        return tag("span", "none", class_="null")
    rows = [[h["key"], payload(h["value"])] for h in headers]
    return tag("details", tag("summary", f"{len(headers)} header(s)"), table(["header", "value"], rows,
                                                                            class_="headers"))


def deadletters_page(view: dict[str, Any], ctx: PageContext) -> Html:
    topics = view["topics"]
    chooser = tag("p", "Dead-letter topics: ", *(tag("a", t, href=url("/deadletters", topic=t, group=view["group"]),
                                                      class_="chosen" if t == view["topic"] else None)
                                                  for t in topics) if topics else "none configured", class_="topics")
    filt = tag("form", tag("input", type="hidden", name="topic", value=view["topic"] or ""),
               _field("group", tag("input", type="text", name="group", value=view["group"] or "")),
               tag("button", "Filter", type="submit"), method="get", action="/deadletters", class_="filter")
    parts = [chooser, filt]
    if view.get("error"):
        parts.append(tag("p", view["error"], class_="flash error"))
    if view["topic"]:
        parts.append(tag("p", f"{view['total']:,} record(s) in {view['topic']} ({len(view['partitions'])} "
                              f"partition(s)); newest first, {view['shown']} shown.", class_="facts"))
        rows = []
        for d in view["records"]:
            src = d["source"]
            source = f"{src['topic']}-{src['partition']} @ {src['offset']}" if src["topic"] is not None else "-"
            rows.append([tag("a", f"{d['partition']}/{d['offset']}",
                             href=url("/deadletter", topic=d["topic"], partition=d["partition"], offset=d["offset"])),
                         _when(d["timestamp"]), d["group"] or "-", source, d["delivery_count"] or "-",
                         d["message"] or "-", payload(d["key"]),
                         payload(d["value"]) if not d["headers_only"] else tag("span", "headers only", class_="null"),
                         _headers(d["headers"])])
        parts.append(table(["partition/offset", "time", "group", "source", "deliveries", "message", "key", "value",
                            "headers"], rows, class_="letters"))
        older = [tag("a", f"older in partition {p}", href=url("/deadletters", topic=view["topic"], group=view["group"],
                                                              partition=p, before=before))
                 for p, before in sorted(view["older"].items())]
        if older:
            parts.append(tag("p", *older, class_="more"))
    return document("Dead letters", Html("".join(parts)), ctx)


def deadletter_page(d: dict[str, Any], ctx: PageContext) -> Html:
    src = d["source"]
    items = [("dead-letter record", f"{d['topic']} partition {d['partition']} offset {d['offset']}"),
             ("time", _when(d["timestamp"])), ("group", d["group"] or "-"),
             ("source record", f"{src['topic']}-{src['partition']} offset {src['offset']}" if src["topic"] else "-"),
             ("delivery count", d["delivery_count"] or "-"), ("message", d["message"] or "-"),
             ("copy", "headers only (the source record is read from its topic on redrive)" if d["headers_only"]
              else "key, value and headers copied")]
    dl = tag("dl", *(Html(tag("dt", k) + tag("dd", v)) for k, v in items), class_="summary")
    body = Html(dl + tag("h2", "Key") + payload(d["key"]) + tag("h2", "Value") + payload(d["value"])
                + tag("h2", "Headers") + table(["header", "value"], [[h["key"], payload(h["value"])]
                                                                     for h in d["headers"]], class_="headers"))
    return document("Dead letter", body, ctx)


def redrives_page(view: dict[str, Any], ctx: PageContext) -> Html:
    parts = []
    rows = []
    for s in view["redrives"]:
        req = s["request"]
        total, done = s["total"], s["examined"]
        bar = tag("progress", f"{done}/{total}", value=done, max=max(total, 1))
        stop = _form("/actions/redrive/stop", ctx, tag("input", type="hidden", name="name", value=s["name"]),
                     button="Stop") if ctx.actions and s["state"] == "running" else ""
        rows.append([req["group"], req["dlq_topic"], req["target"] or "(source topics)", s["state"], bar,
                     f"{s['redriven']:,}", f"{s['passed_over']:,}", f"{s['missing']:,}", req["principal"] or "-",
                     s["error"] or "", stop])
    parts.append(tag("h2", "In this sidecar"))
    parts.append(table(["group", "dead-letter topic", "to", "state", "progress", "redriven", "passed over", "missing",
                        "by", "error", ""], rows, class_="redrives") if rows
                 else tag("p", "No redrive has run in this sidecar since it started.", class_="empty"))
    stored = view.get("stored")
    if stored is not None:
        parts.append(tag("h2", "Positions kept on the backend"))
        parts.append(table(["redrive", "group", "dead-letter topic", "to", "left", "by"],
                           [[p["name"], p["group"], p["dlq_topic"], p["target"] or "(source topics)", p["left"],
                             p["by"] or "-"] for p in stored]) if stored
                     else tag("p", "None.", class_="empty"))
    if view.get("error"):
        parts.append(tag("p", view["error"], class_="flash error"))
    return document("Redrives", Html("".join(parts)), ctx)
