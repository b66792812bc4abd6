"""The capacity model (kshare_sidecar/capacity.py) against a measured run of benchmarks/scale.py.

Takes the workload the run applied (share-partitions, members, the busy phase's records/s and
record size) and prints, for each figure the model predicts, the prediction next to what the run
measured (the records a ShareFetch delivered are the run's own figure, as a workload's
max.poll.records would be): the sidecar's peak RSS, its CPU while members heartbeat, its CPU during the busy phase,
the state topic's write rate then, and recovery after kill -9 (the model's time on a core of its
own against the CPU seconds the restarted sidecar used until it listened, and the wall time).

Usage: python benchmarks/capacity_check.py SCALE_JSON [--markdown]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kshare_sidecar.capacity import UnitCosts, Workload, plan

RECORD_BYTES = 1024  # benchmarks/scale.py's busy records


def rows(summary: dict, costs: UnitCosts | None = None) -> list[tuple[str, float, float, str]]:
    """(figure, predicted, measured, unit) for one scale.json."""
    c = costs or UnitCosts()
    s = summary["results"]["scale"]
    params = summary["parameters"]
    hb, busy = s["heartbeats"], s["busy"]
    members, sps = s["members"], s["share_partitions"]
    idle = plan(Workload(records_per_s=0, share_partitions=sps, members=members), c,
                target_utilization=1.0, spare=0)
    out = [("CPU while members heartbeat", idle.cpu_share_per_sidecar, hb["sidecar_cpu_share"], "of a core")]
    rate = busy["records"] / busy["seconds"] if busy.get("seconds") else 0.0
    # records a ShareFetch delivered: MaxRecords is soft (whole log batches), so the run's own figure
    delivered = busy.get("fetches", 0) - busy.get("empty_fetches", 0)  # an empty long poll writes nothing
    per_fetch = busy["records"] / delivered if delivered else params["max_records"]
    working = plan(Workload(records_per_s=rate, record_bytes=RECORD_BYTES, share_partitions=sps, members=members,
                            records_per_fetch=per_fetch, partitions_per_fetch=1.0), c,
                   target_utilization=1.0, spare=0)
    out.append(("CPU during the busy phase", working.cpu_share_per_sidecar,
                round(busy["sidecar_cpu_s"] / busy["seconds"], 4), "of a core"))
    out.append(("state-topic writes, busy phase", working.state_records_per_s, busy["state_records_per_s"],
                "records/s"))
    out.append(("peak RSS", working.memory_mb_per_sidecar, s["rss_mb_peak"], "MB"))
    rec = s.get("recovery") or {}
    if "after_kill_cpu_s_to_listen" in rec:
        out.append(("recovery after kill -9 (CPU s to listen)", working.recovery_s_restart,
                    rec["after_kill_cpu_s_to_listen"], "s"))
        out.append(("recovery after kill -9 (wall s to listen, this host)", working.recovery_s_restart,
                    rec["after_kill_listening_s"], "s"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scale_json", type=Path)
    ap.add_argument("--markdown", action="store_true", help="a markdown table")
    args = ap.parse_args()
    summary = json.loads(args.scale_json.read_text())
    p = summary["parameters"]
    s = summary["results"]["scale"]
    print(f"{s['share_partitions']} share-partitions ({p['groups']} groups × {p['partitions']}), "
          f"{s['members']} members; load {summary['loadavg_before']} -> {summary['loadavg_after']}")
    if args.markdown:
        print("| figure | predicted | measured | measured ÷ predicted |\n|---|---:|---:|---:|")
    for name, pred, meas, unit in rows(summary):
        ratio = f"{meas / pred:.2f}" if pred else "-"
        if args.markdown:
            print(f"| {name} | {pred} {unit} | {meas} {unit} | {ratio} |")
        else:
            print(f"{name:<55} predicted {pred:>10} measured {meas:>10} {unit:<10} ratio {ratio}")


if __name__ == "__main__":
    main()
