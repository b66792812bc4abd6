"""Scale of one sidecar: thousands of share groups and members, most of them idle.

On one Kafka 3.9 broker, one sidecar (``kshare sidecar run``, its own process) is given G share
groups over T topics of P partitions each (G × P share-partitions; full run 1,000 × 100 =
100,000), M members (full run 2,000) simulated by one or two load-generator processes
(benchmarks/scale_load.py: the protocol spoken directly over asyncio, one TCP connection per
member, heartbeating at the interval the coordinator gives, Kafka's default 5 s), of which a
few busy groups (B groups of two members on their own topic with a backlog) fetch and
acknowledge records at a fixed pace while the rest idle. Figures:

- RSS of the sidecar per idle share-partition (initialized; then also loaded by one fetch) and
  per member (from the RSS growth of each phase);
- heartbeat latency p50/p99 as the members see it (the load generators' clock; 2,000 members at
  5 s are 400 heartbeats/s);
- the busy groups' ShareFetch latency p50/p99 while the rest idle, and the same busy workload on
  a fresh sidecar with no idle groups (run first, for the comparison) — of the fetches that
  delivered records (a fetch that finds the backlog consumed waits out its MaxWaitMs; those are
  counted as ``empty_fetches``);
- state-topic records and bytes written per second (idle heartbeating, busy phase) and per
  acknowledgement batch;
- CPU of the sidecar while idle: members heartbeating, and quiescent (the load generators
  stopped for a while: only the sidecar's own timers, tails and polls);
- recovery: the sidecar killed (kill -9) and started again on the same state topic — seconds
  until it listens (the whole state replayed first) and until every member heartbeats again
  (bounded below by their 5 s interval); then a clean restart's start-up.

Everything shares this machine (the broker, the load generators, other users): the JSON records
the load averages, and for the heartbeat and busy phases the share of the time the sidecar's (and
the load generators') main thread was runnable but waiting for a core (``/proc/PID/schedstat``):
near 0 on a quiet host; where it is high, latencies measure the host's run queue more than the
sidecar. Figures are provisional unless measured on a quiet host.

Usage: python benchmarks/scale.py [--quick] [--groups G] [--partitions P] [--topics T]
       [--members M] [--busy-groups B] [--window S] [--loadgens 1|2] [--out DIR]
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import (
    SidecarProcess,
    base_parser,
    context_switches,
    finish,
    free_port,
    loadavg,
    machine,
    metric_sum,
    percentile,
    produce_records,
)

LOADGEN = Path(__file__).resolve().parent / "scale_load.py"
BUSY_MEMBERS = 2  # per busy group
RECORD_BYTES = 1024


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_s(pid: int) -> float:
    """Seconds the process's main thread was runnable but waited for a core (/proc/PID/schedstat):
    on a shared host, what its latencies owe to other processes rather than to its own work."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class LoadGens:
    """One or two load-generator processes; each group lives in exactly one of them."""

    def __init__(self, bootstrap: str, count: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, str(LOADGEN), bootstrap], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True) for _ in range(count)]

    def gen_of(self, group_index: int) -> int:
        return group_index % len(self.procs)

    def call(self, per_gen: list[dict | None]) -> list[dict]:
        """Send each load generator its command (None: nothing) and wait for every answer."""
        sent = []
        for proc, cmd in zip(self.procs, per_gen):
            if cmd is not None:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps(cmd) + "\n")
                proc.stdin.flush()
                sent.append(proc)
        out = []
        for proc in sent:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"load generator {proc.pid} exited ({proc.poll()})")
            out.append(json.loads(line))
        return out

    def all(self, cmd: dict) -> list[dict]:
        return self.call([cmd] * len(self.procs))

    def signal(self, sig: int) -> None:
        for proc in self.procs:
            proc.send_signal(sig)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # stopping anyway
            self.all({"cmd": "quit"})
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


class Plan:
    """Who is in which group, on which topic, in which load generator."""

    def __init__(self, args, idle_topics: list[str], busy_topic: str, run: str) -> None:
        self.groups: list[tuple[str, str, int]] = []  # (group, topic, partitions)
        idle = max(0, args.groups - args.busy_groups)
        for g in range(idle):
            self.groups.append((f"scale-{run}-g{g:04d}", idle_topics[g % len(idle_topics)], args.partitions))
        self.busy = [(f"scale-{run}-busy{b}", busy_topic, args.busy_partitions) for b in range(args.busy_groups)]
        self.idle_count = idle
        # members: B × 2 busy, one per idle group first (phase A), the rest round-robin (phase B)
        rest = max(0, args.members - BUSY_MEMBERS * args.busy_groups)
        self.first = [(i, str(uuid.uuid4())) for i in range(min(idle, rest))]
        self.more = [(i % idle, str(uuid.uuid4())) for i in range(rest - len(self.first))] if idle else []
        self.busy_members = [(b, str(uuid.uuid4())) for b in range(args.busy_groups) for _ in range(BUSY_MEMBERS)]

    def share_partitions(self) -> int:
        return sum(p for _g, _t, p in self.groups) + sum(p for _g, _t, p in self.busy)


def join(gens: LoadGens, entries: list[tuple[int, str]], groups: list[tuple[str, str, int]],
         offset: int = 0) -> float:
    """Members (group index, member id) join; returns the seconds until every group is assigned."""
    per_gen: list[dict | None] = [{"cmd": "join", "members": [], "partitions": {}} for _ in gens.procs]
    for gi, member_id in entries:
        group, topic, parts = groups[gi]
        cmd = per_gen[gens.gen_of(gi + offset)]
        assert cmd is not None
        cmd["members"].append([group, member_id, [topic]])
        cmd["partitions"][group] = parts
    answers = gens.call([c if c and c["members"] else None for c in per_gen])
    return max((a["seconds"] for a in answers), default=0.0)


def busy_phase(gens: LoadGens, plan: Plan, args, sidecar: SidecarProcess, name: str = "busy") -> dict:
    per_gen: list[dict | None] = [None] * len(gens.procs)
    for b, (group, _t, _p) in enumerate(plan.busy):
        i = gens.gen_of(b + plan.idle_count)
        cmd = per_gen[i] or {"cmd": "busy", "groups": [], "seconds": args.busy_seconds, "pace_ms": args.pace_ms,
                             "max_records": args.max_records}
        cmd["groups"].append(group)
        per_gen[i] = cmd
    if not any(per_gen):
        return {}
    before_m = sidecar.samples()
    c0, t0, w0 = cpu_s(sidecar.proc.pid), time.monotonic(), wait_s(sidecar.proc.pid)
    s0 = context_switches(sidecar.proc.pid)
    spy = Spy(args, sidecar.proc.pid, name, args.busy_seconds)
    answers = gens.call(per_gen)
    spy.wait()
    seconds, cpu = time.monotonic() - t0, cpu_s(sidecar.proc.pid) - c0
    wakeups = context_switches(sidecar.proc.pid)[0] - s0[0]
    waited = wait_s(sidecar.proc.pid) - w0
    after_m = sidecar.samples()
    lat = sorted(x for a in answers for x in a["fetch_ms"])
    records = sum(a["records"] for a in answers)
    writes = metric_sum(after_m, "kshare_state_records_written_total") - \
        metric_sum(before_m, "kshare_state_records_written_total")
    wbytes = metric_sum(after_m, "kshare_state_bytes_written_total") - \
        metric_sum(before_m, "kshare_state_bytes_written_total")
    empty = sum(a.get("empty_fetches", 0) for a in answers)
    fetches = len(lat) + empty
    # latencies of the fetches that delivered: an empty one (the backlog consumed) waits out its
    # MaxWaitMs by design
    return {"fetches": fetches, "empty_fetches": empty, "records": records, "records_per_s": round(records / seconds),
            "gc": gc_figures(before_m, after_m),
            "fetch_p50_ms": _r(percentile(lat, 50)), "fetch_p99_ms": _r(percentile(lat, 99)),
            "fetch_max_ms": _r(lat[-1] if lat else None), "errors": sum(a["errors"] for a in answers),
            "sidecar_cpu_s": round(cpu, 2), "sidecar_cpu_s_per_1m_records": round(cpu / records * 1e6, 2)
            if records else None,
            "state_records_per_s": round(writes / seconds, 1), "state_bytes_per_s": round(wbytes / seconds),
            "state_records_per_fetch": round(writes / fetches, 3) if fetches else None,
            "state_bytes_per_record_written": round(wbytes / writes) if writes else None,
            "sidecar_wakeups_per_s": round(wakeups / seconds, 1),
            "sidecar_runnable_waiting_share": round(waited / seconds, 3), "seconds": round(seconds, 1)}


def gc_figures(before: dict[str, float], after: dict[str, float]) -> dict:
    """The sidecar's garbage collections between two scrapes, per generation: how many, and the
    seconds it stood still in them (kshare_gc_*; a full collection walks every object not frozen)."""
    out = {}
    for gen in ("0", "1", "2"):
        def d(name: str) -> float:
            key = f'{name}{{generation="{gen}"}}'
            return after.get(key, 0.0) - before.get(key, 0.0)
        out[gen] = {"collections": int(d("kshare_gc_collections_total")),
                    "pause_s": round(d("kshare_gc_pause_seconds_total"), 3)}
    out["longest_pause_s"] = round(max((v for k, v in after.items() if k.startswith("kshare_gc_pause_max_seconds")),
                                       default=0.0), 3)
    return out


def merged_errors(stats: list[dict]) -> dict[str, int]:
    """The load generators' heartbeat errors by name, summed."""
    errors: dict[str, int] = {}
    for s in stats:
        for k, v in s["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return errors


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


class Spy:
    """``py-spy record`` of the sidecar over one phase (--py-spy DIR), collapsed stacks to DIR/NAME.txt."""

    def __init__(self, args, pid: int, name: str, seconds: float) -> None:
        self.proc = None
        if args.py_spy is not None:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            spy = Path(sys.executable).parent / "py-spy"
            self.proc = subprocess.Popen([str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
                                          "--rate", "200", "--format", "raw", "--native",
                                          "--output", str(args.py_spy / f"{name}.txt")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def heartbeat_window(gens: LoadGens, sidecar: SidecarProcess, seconds: float, args=None, name: str = "") -> dict:
    before_m = sidecar.samples()  # scraped outside the window
    gens.all({"cmd": "stats"})  # reset
    spy = Spy(args, sidecar.proc.pid, name, seconds) if args is not None else None
    c0, t0, w0 = cpu_s(sidecar.proc.pid), time.monotonic(), wait_s(sidecar.proc.pid)
    s0 = context_switches(sidecar.proc.pid)
    gw0 = [wait_s(p.pid) for p in gens.procs]
    time.sleep(seconds)
    cpu, wall = cpu_s(sidecar.proc.pid) - c0, time.monotonic() - t0
    wakeups = context_switches(sidecar.proc.pid)[0] - s0[0]
    waited = wait_s(sidecar.proc.pid) - w0
    gen_waited = max((wait_s(p.pid) - w for p, w in zip(gens.procs, gw0)), default=0.0)
    stats = gens.all({"cmd": "stats"})
    if spy is not None:
        spy.wait()
    after_m = sidecar.samples()
    lat = sorted(x for s in stats for x in s["hb_ms"])
    errors = merged_errors(stats)
    writes = metric_sum(after_m, "kshare_state_records_written_total") - \
        metric_sum(before_m, "kshare_state_records_written_total")
    return {"heartbeats": len(lat), "heartbeats_per_s": round(len(lat) / wall, 1),
            "gc": gc_figures(before_m, after_m),
            "p50_ms": _r(percentile(lat, 50)), "p99_ms": _r(percentile(lat, 99)), "max_ms": _r(lat[-1] if lat else None),
            "errors": errors, "sidecar_cpu_share": round(cpu / wall, 4),
            "sidecar_cpu_us_per_heartbeat": round(cpu / len(lat) * 1e6) if lat else None,
            "sidecar_wakeups_per_s": round(wakeups / wall, 1),
            "sidecar_wakeups_per_heartbeat": round(wakeups / len(lat), 3) if lat else None,
            "state_records_per_s": round(writes / wall, 2),
            "sidecar_runnable_waiting_share": round(waited / wall, 3),
            "loadgen_runnable_waiting_share": round(gen_waited / wall, 3), "seconds": round(wall, 1)}


def make_topics(bootstrap: str, args, run: str) -> tuple[list[str], str]:
    from tests.support import create_topic

    idle = [f"scale-{run}-idle{t}" for t in range(args.topics)]
    for t in idle:
        create_topic(bootstrap, t, args.partitions)
    busy = f"scale-{run}-busy"
    backlog = 2 * BUSY_MEMBERS * args.max_records * int(args.busy_seconds * 1000 / args.pace_ms + 1)
    produce_records(bootstrap, busy, backlog, partitions=args.busy_partitions, record_bytes=RECORD_BYTES)
    return idle, busy


def sidecar_env(state_topic: str) -> dict[str, str]:
    return {"KSHARE_STATE_TOPIC": state_topic, "KSHARE_STATE_TOPIC_PARTITIONS": "16"}


def baseline(bootstrap: str, args, idle_topics: list[str], busy_topic: str) -> dict:
    """The busy groups alone on a fresh sidecar: what their fetch latency is without idle groups."""
    plan = Plan(args, idle_topics, busy_topic, "base" + uuid.uuid4().hex[:6])
    with SidecarProcess(bootstrap, metrics_port=free_port(), env=sidecar_env(f"__kshare_scale_{uuid.uuid4().hex[:8]}")) \
            as sidecar:
        gens = LoadGens(sidecar.bootstrap, args.loadgens)
        try:
            join(gens, plan.busy_members, plan.busy)
            return busy_phase(gens, plan, args, sidecar, "busy-alone")
        finally:
            gens.close()


def scale_run(bootstrap: str, args, idle_topics: list[str], busy_topic: str, out: Path) -> dict:
    res: dict = {}
    plan = Plan(args, idle_topics, busy_topic, "run" + uuid.uuid4().hex[:6])
    res["share_partitions"] = plan.share_partitions()
    res["members"] = len(plan.first) + len(plan.more) + len(plan.busy_members)
    state_topic = f"__kshare_scale_{uuid.uuid4().hex[:8]}"
    env = sidecar_env(state_topic)
    metrics_port = free_port()
    sidecar = SidecarProcess(bootstrap, metrics_port=metrics_port, env=env, log=out / "scale-sidecar.log")
    pid = sidecar.proc.pid
    gens = LoadGens(sidecar.bootstrap, args.loadgens)
    try:
        time.sleep(2)
        rss0 = rss_mb(pid)
        c0 = cpu_s(pid)
        time.sleep(args.quiet_s)
        res["empty"] = {"rss_mb": rss0, "cpu_share": round((cpu_s(pid) - c0) / args.quiet_s, 4)}
        print(f"empty sidecar: {res['empty']}", flush=True)
        # phase A: one member per idle group: every group's share-partitions are initialized
        secs = join(gens, plan.first, plan.groups)
        time.sleep(1)
        rss1 = rss_mb(pid)
        idle_sp = sum(p for _g, _t, p in plan.groups)
        res["initialize"] = {"groups": plan.idle_count, "share_partitions": idle_sp, "seconds": secs, "rss_mb": rss1}
        print(f"initialized: {res['initialize']}", flush=True)
        # every idle share-partition loaded once (a fetch), then left idle
        groups = [g for g, _t, _p in plan.groups]
        per_gen: list[dict | None] = [{"cmd": "load", "groups": [g for i, g in enumerate(groups)
                                                                 if gens.gen_of(i) == k]} for k in range(len(gens.procs))]
        answers = gens.call(per_gen)
        time.sleep(1)
        rss2 = rss_mb(pid)
        res["load"] = {"share_partitions": sum(a["share_partitions"] for a in answers),
                       "seconds": max(a["seconds"] for a in answers), "rss_mb": rss2}
        print(f"loaded: {res['load']}", flush=True)
        # phase B: the other members join the idle groups, the busy groups join
        secs = join(gens, plan.more, plan.groups)
        time.sleep(1)
        rss3 = rss_mb(pid)
        res["more_members"] = {"members": len(plan.more), "seconds": secs, "rss_mb": rss3}
        print(f"more members: {res['more_members']}", flush=True)
        join(gens, plan.busy_members, plan.busy, offset=plan.idle_count)
        per_member = (rss3 - rss2) / len(plan.more) * 1024 if plan.more else None
        first_members_mb = (per_member or 0) * len(plan.first) / 1024
        res["memory"] = {
            "rss_mb": rss_mb(pid),
            "kb_per_member": _r(per_member),
            "bytes_per_idle_share_partition_initialized": round((rss1 - rss0 - first_members_mb) * 2**20 / idle_sp)
            if idle_sp else None,
            "bytes_per_idle_share_partition_loaded": round((rss2 - rss0 - first_members_mb) * 2**20 / idle_sp)
            if idle_sp else None}
        print(f"memory: {res['memory']}", flush=True)
        res["heartbeats"] = heartbeat_window(gens, sidecar, args.window, args, "heartbeats")
        print(f"heartbeats (idle): {res['heartbeats']}", flush=True)
        res["busy"] = busy_phase(gens, plan, args, sidecar)
        print(f"busy groups among the idle: {res['busy']}", flush=True)
        res["heartbeats_after_busy"] = heartbeat_window(gens, sidecar, min(args.window, 20))
        # quiescent: nobody sends anything for a while (well within the 45 s session timeout)
        gens.signal(signal.SIGSTOP)
        try:
            time.sleep(2)
            c0, t0 = cpu_s(pid), time.monotonic()
            time.sleep(args.quiet_s)
            res["quiescent_cpu_share"] = round((cpu_s(pid) - c0) / (time.monotonic() - t0), 4)
        finally:
            gens.signal(signal.SIGCONT)
        print(f"quiescent CPU share: {res['quiescent_cpu_share']}", flush=True)
        res["rss_mb_peak"] = rss_mb(pid)
        if not args.skip_recovery:
            res["recovery"] = recovery(gens, sidecar, bootstrap, env, out, res["members"])
            sidecar = res["recovery"].pop("sidecar")
            print(f"recovery: {res['recovery']}", flush=True)
        return res
    finally:
        gens.close()
        sidecar.stop()


def recovery(gens: LoadGens, sidecar: SidecarProcess, bootstrap: str, env: dict, out: Path, members: int) -> dict:
    """kill -9, start again on the same port and state topic; then a clean restart."""
    res: dict = {}
    gens.all({"cmd": "mark"})
    killed = time.time()
    sidecar.proc.kill()
    sidecar.proc.wait()
    log = out / "scale-recovery.log"
    log.unlink(missing_ok=True)
    new = SidecarProcess(bootstrap, metrics_port=free_port(), env=env, port=sidecar.port, log=log,
                         log_level="INFO", start_timeout_s=600)
    res["after_kill_listening_s"] = round(new.listening_s, 2)
    res["after_kill_cpu_s_to_listen"] = round(cpu_s(new.proc.pid), 2)
    res["after_kill_replay"] = replay_line(log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        answers = gens.all({"cmd": "recovered"})
        if sum(a["members"] for a in answers) >= members:
            res["after_kill_all_members_s"] = round(max(a["last"] for a in answers) - killed, 2)
            break
        time.sleep(0.5)
    else:
        res["after_kill_members_back"] = sum(a["members"] for a in gens.all({"cmd": "recovered"}))
    res["rss_mb_after_recovery"] = rss_mb(new.proc.pid)
    new.stop()
    log.unlink(missing_ok=True)
    again = SidecarProcess(bootstrap, metrics_port=free_port(), env=env, port=sidecar.port, log=log,
                           log_level="INFO", start_timeout_s=600)
    res["clean_restart_listening_s"] = round(again.listening_s, 2)
    res["clean_restart_cpu_s_to_listen"] = round(cpu_s(again.proc.pid), 2)
    res["clean_restart_replay"] = replay_line(log)
    res["sidecar"] = again
    return res


def replay_line(log: Path) -> dict:
    """What the persister's recovery log line says: records replayed, share-partitions, seconds (the
    last of its lines: a fenced-mode start-up reads on up to its own owner records once more)."""
    import re

    found = {}
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"persister recovered (\d+) records \((\d+) share-partitions, (\d+) groups, (\d+) members.*"
                      r" in ([0-9.]+)s", line)
        if m:
            found = {"records": int(m[1]), "share_partitions": int(m[2]), "groups": int(m[3]),
                     "members": int(m[4]), "seconds": float(m[5])}
    return found


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--groups", type=int)
    ap.add_argument("--partitions", type=int, help="partitions of each idle topic (share-partitions per group)")
    ap.add_argument("--topics", type=int, help="idle topics the groups are spread over")
    ap.add_argument("--members", type=int)
    ap.add_argument("--busy-groups", type=int)
    ap.add_argument("--busy-partitions", type=int, default=8)
    ap.add_argument("--busy-seconds", type=float)
    ap.add_argument("--pace-ms", type=int, default=50, help="a busy member's ShareFetch every this many ms at most")
    ap.add_argument("--max-records", type=int, default=200, help="MaxRecords of a busy member's ShareFetch")
    ap.add_argument("--window", type=float, help="seconds of idle heartbeating measured")
    ap.add_argument("--quiet-s", type=float, default=10.0)
    ap.add_argument("--loadgens", type=int)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--py-spy", type=Path, help="profile the sidecar's heartbeat window and busy phases into DIR")
    ap.add_argument("--skip-recovery", action="store_true")
    args = ap.parse_args()
    quick = args.quick
    for name, full, small in (("groups", 1000, 20), ("partitions", 100, 10), ("topics", 10, 2),
                              ("members", 2000, 40), ("busy_groups", 4, 2), ("busy_seconds", 30.0, 5.0),
                              ("window", 60.0, 10.0), ("loadgens", 2, 1)):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    if quick:
        args.quiet_s = min(args.quiet_s, 5.0)
    args.out.mkdir(parents=True, exist_ok=True)

    from kshare_sidecar.testing import KafkaBroker

    load_before = loadavg()
    results: dict = {}
    with KafkaBroker("3.9", heap="1g") as broker:
        run = uuid.uuid4().hex[:6]
        idle_topics, busy_topic = make_topics(broker.bootstrap, args, run)
        if not args.skip_baseline:
            results["baseline_no_idle"] = baseline(broker.bootstrap, args, idle_topics, busy_topic)
            print(f"busy groups alone: {results['baseline_no_idle']}", flush=True)
        results["scale"] = scale_run(broker.bootstrap, args, idle_topics, busy_topic, args.out)
    s = results["scale"]
    base = results.get("baseline_no_idle")
    summary = {
        "scenario": "scale", "machine": machine(), "loadavg_before": load_before, "loadavg_after": loadavg(),
        "parameters": {k: getattr(args, k) for k in ("groups", "partitions", "topics", "members", "busy_groups",
                                                     "busy_partitions", "busy_seconds", "pace_ms", "max_records",
                                                     "window", "loadgens")},
        "share_partitions": s["share_partitions"], "members": s["members"],
        "rss_mb": s["rss_mb_peak"], "kb_per_member": s["memory"]["kb_per_member"],
        "bytes_per_idle_share_partition": s["memory"]["bytes_per_idle_share_partition_loaded"],
        "heartbeat_p50_ms": s["heartbeats"]["p50_ms"], "heartbeat_p99_ms": s["heartbeats"]["p99_ms"],
        "busy_fetch_p99_ms": s["busy"].get("fetch_p99_ms"),
        "busy_fetch_p99_ms_no_idle": base.get("fetch_p99_ms") if base else None,
        "idle_cpu_share_heartbeating": s["heartbeats"]["sidecar_cpu_share"],
        "idle_cpu_share_quiescent": s["quiescent_cpu_share"],
        "recovery_after_kill_s": s.get("recovery", {}).get("after_kill_listening_s"),
        "results": results,
    }
    finish(summary, args.out, "scale")


if __name__ == "__main__":
    main()
