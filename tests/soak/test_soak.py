"""``make soak``: an hour of steady share-consume load with periodic faults (tests/soak/harness.py),
then the verdicts: nothing lost, nothing accepted twice, every share-partition drained (SPSO at the
log end), RSS levelling off and file descriptors flat on the sidecar that was never restarted,
the state topic bounded (tests/soak/rules.py). The per-interval figures are printed and written to
``soak-report.json`` / ``soak-report.md`` in ``--soak-out`` (default: the test's tmp directory).

Opt-in (``pytest --run soak``); ``--soak-minutes`` (default 60) and ``--soak-interval-minutes``
(default 10) set the length; ``make soak SOAK_MINUTES=5 SOAK_INTERVAL_MINUTES=1`` is a smoke run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.soak.harness import Options, Soak
from tests.soak.rules import MIB, fds_flat, rss_levels_off, state_topic_bounded

pytestmark = [pytest.mark.kafka, pytest.mark.optin("soak"), pytest.mark.timeout(0)]

MAX_RSS_MIB_PER_HOUR = 16.0
FD_SLACK = 8
STATE_MARGIN = 24 * MIB  # one open segment of state writes not yet cleaned (segment.ms 10 min)


def test_soak(request, tmp_path):
    minutes = float(request.config.getoption("--soak-minutes", "60"))
    interval = float(request.config.getoption("--soak-interval-minutes", "10")) * 60
    out_dir = Path(request.config.getoption("--soak-out", "") or tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    opts = Options(minutes=minutes, interval_s=interval, sidecars=int(request.config.getoption("--soak-sidecars", "2")),
                   fault_every_s=min(240.0, max(30.0, minutes * 60 / 8)))
    soak = Soak(opts, tmp_path)
    try:
        soak.start()
        soak.run()
    finally:
        soak.stop()
    verdicts = _verdicts(soak, opts)
    report = {"options": vars(opts), "intervals": soak.intervals, "faults": soak.faults,
              "verdicts": [(v.ok, v.text) for v in verdicts], "failures": soak.failures,
              "spso_lag": soak.spso_lag, "drained_after_s": soak.drained_after_s, "produced": len(soak.ledger.produced),
              "deliveries": soak.ledger.deliveries, "client_errors": dict(soak.ledger.errors.most_common(10))}
    (out_dir / "soak-report.json").write_text(json.dumps(report, indent=1, default=str))
    (out_dir / "soak-report.md").write_text(markdown(soak))
    print("\n" + markdown(soak))
    for v in verdicts:
        print(("PASS " if v.ok else "FAIL ") + v.text)
    assert not soak.failures, soak.failures
    assert all(v.ok for v in verdicts), [v.text for v in verdicts if not v.ok]


def _verdicts(soak: Soak, opts: Options):
    from tests.soak.rules import Verdict

    ledger = soak.ledger
    out = []
    lost = ledger.never_delivered()
    out.append(Verdict(not lost, f"records never delivered: {len(lost)} of {len(ledger.produced)} {lost[:5]}"))
    twice = ledger.doubly_accepted()
    out.append(Verdict(not twice, f"records accepted twice: {len(twice)} {twice[:5]}"))
    out.append(Verdict(not ledger.redelivered_after_ack, "records delivered again after a successful "
                       f"acknowledgement: {len(ledger.redelivered_after_ack)} {ledger.redelivered_after_ack[:5]}"))
    lag = soak.spso_lag
    drained = isinstance(lag, dict) and len(lag) > 0 and all(v[1] == 0 for v in lag.values())
    out.append(Verdict(drained, f"share-partitions drained at the end (start offset, lag): {lag}"))
    unseen = ledger.without_seen_ack()
    out.append(Verdict(True, f"delivered without a successful acknowledgement seen by a client: {len(unseen)} "
                       f"(archived at the delivery limit or acknowledged by a consumer killed before it wrote "
                       f"the outcome; the drained SPSO accounts for them)"))
    warmup = opts.interval_s
    # a smoke run is too short to tell warm-up from growth (a 12-minute run's late slope is noise)
    judge_growth = len(soak.intervals) >= 4 and opts.minutes >= 30
    for node in soak.sidecars:
        born = soak.births.get(node, 0.0)
        rss = [(t - born, v) for t, v in soak.samples.get(f"rss{node}", []) if t >= born]
        fds = [(t - born, int(v)) for t, v in soak.samples.get(f"fds{node}", []) if t >= born]
        judged = (node == 1 or opts.sidecars == 1) and judge_growth
        for verdict in (rss_levels_off(rss, warmup, MAX_RSS_MIB_PER_HOUR), fds_flat(fds, warmup, FD_SLACK)):
            out.append(Verdict(verdict.ok or not judged,
                               f"sidecar {node}{'' if judged else ' (reported only: restarted by the faults, or a short run)'}: "
                               f"{verdict.text}"))
    disk = [row["state_disk_max_mib"] * MIB for row in soak.intervals if row.get("state_disk_max_mib") is not None]
    out.append(state_topic_bounded([int(d) for d in disk], STATE_MARGIN))
    return out


def markdown(soak: Soak) -> str:
    nodes = sorted(soak.sidecars)
    head = ["min", *[f"RSS{n} MiB (max)" for n in nodes], *[f"fds{n}" for n in nodes], "state MiB max/end",
            "state records", "delivered", "acked", "e2e p50/p99 ms", "ShareFetch p50/p99 ms",
            "ShareAck p50/p99 ms", "faults", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in soak.intervals:
        cells = [f"{r['start_s'] / 60:.0f}-{r['end_s'] / 60:.0f}"]
        cells += [f"{r.get(f'rss{n}_mib')} ({r.get(f'rss{n}_max_mib')})" for n in nodes]
        cells += [f"{r.get(f'fds{n}')}" for n in nodes]
        cells += [f"{r['state_disk_max_mib']}/{r['state_disk_end_mib']}", str(r.get("state_records")),
                  str(r["delivered"]), str(r["acked"]), f"{r['e2e_p50_ms']}/{r['e2e_p99_ms']}",
                  f"{r['ShareFetch_p50_ms']}/{r['ShareFetch_p99_ms']}",
                  f"{r['ShareAcknowledge_p50_ms']}/{r['ShareAcknowledge_p99_ms']}", ", ".join(r["faults"]),
                  f"{r['load']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
