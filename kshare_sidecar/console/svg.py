"""The console's small inline SVG pictures: time-series sparklines, the share-partition strip
(SPSO to SPEO, one colour per record state) and the delivery-count histogram.

Built with :mod:`.html`'s ``tag`` like the rest of the page (every value escaped); colours are
classes styled by console.css, so no inline style is needed (the CSP has no 'unsafe-inline').
"""

from __future__ import annotations

from collections.abc import Sequence

from .html import Html, tag

#: Strip colours and legend order: the record states, and the sidecar's holds (docs/extensions.md).
KINDS = ("available", "acquired", "backoff", "keyorder", "deadletter", "acknowledged", "archived")
KIND_LABELS = {"available": "available", "acquired": "acquired", "backoff": "held: release backoff",
               "keyorder": "held: key order", "deadletter": "held: dead-letter write",
               "acknowledged": "acknowledged", "archived": "archived"}


def sparkline(values: Sequence[float | None], *, width: int = 160, height: int = 32, label: str = "") -> Html:
    """A line of the last values (None = no sample), scaled to their own maximum."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    top = max((v for _, v in points), default=0.0) or 1.0
    n = max(len(values) - 1, 1)
    coords = " ".join(f"{i * (width - 2) / n + 1:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in points)
    last = points[-1][1] if points else None
    title = f"{label}: last {_num(last)}, max {_num(top if points else None)} over {len(points)} samples"
    return tag("svg", tag("title", title),
               tag("polyline", points=coords, class_="spark") if len(points) > 1 else None,
               width=width, height=height, viewbox=f"0 0 {width} {height}", class_="sparkline", role="img",
               aria_label=title)


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.2f}"


def strip(segments: Sequence[tuple[int, int, str]], spso: int, end: int, *, width: int = 640,
          height: int = 22) -> Html:
    """Offsets [spso, end) as coloured runs ``(first, last, kind)``; a run narrower than a pixel
    still shows (at least 1 px), so a single acquired record in a long window is visible."""
    span = max(end - spso, 1)
    scale = width / span
    rects = []
    for first, last, kind in segments:
        x = (first - spso) * scale
        w = max((last - first + 1) * scale, 1.0)
        n = last - first + 1
        title = f"{first}" if n == 1 else f"{first}-{last}"
        rects.append(tag("rect", tag("title", f"{title}: {n} record(s) {KIND_LABELS.get(kind, kind)}"),
                         x=f"{x:.2f}", y=0, width=f"{w:.2f}", height=height, class_=f"k-{kind}"))
    label = f"in-flight window {spso}..{end - 1}" if end > spso else f"empty window at {spso}"
    return tag("svg", tag("title", label), *rects, width=width, height=height,
               viewbox=f"0 0 {width} {height}", class_="strip", role="img", aria_label=label,
               preserveaspectratio="none")


def histogram(counts: dict[int, int], limit: int, *, width: int = 220, height: int = 60) -> Html:
    """Records in the window by delivery count, 0..limit (the last bar is the limit)."""
    top = max(counts.values(), default=0) or 1
    slots = limit + 1
    bar = width / slots
    parts = []
    for c in range(slots):
        n = counts.get(c, 0)
        h = (n / top) * (height - 12)
        parts.append(tag("rect", tag("title", f"delivery count {c}: {n} record(s)"), x=f"{c * bar + 1:.1f}",
                         y=f"{height - 12 - h:.1f}", width=f"{max(bar - 2, 1):.1f}", height=f"{h:.1f}",
                         class_="bar limit" if c == limit else "bar"))
        parts.append(tag("text", str(c), x=f"{c * bar + bar / 2:.1f}", y=height - 1, class_="axis"))
    return tag("svg", tag("title", "delivery-count histogram"), *parts, width=width, height=height,
               viewbox=f"0 0 {width} {height}", class_="hist", role="img", aria_label="delivery-count histogram")
