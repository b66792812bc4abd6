"""The nemesis: a cluster of three sidecars on Kafka 3.9 under a steady share-consume (confluent-
kafka's ShareConsumer and kshare's asyncio client, two of each, explicit ACCEPT) while the
network fails — every process on its own address in network namespaces the test makes
(tests/e2e/nemesis_lab.py), faults by iptables DROP rules, delays by a proxy. Each run ends with
the checker (kshare_sidecar.testing.nemesis) over what every client saw and the state topic:
nothing lost or accepted twice, no record held by two consumers at once, delivery counts never
down (and repeated only across an unplanned change of owner), SPSOs never back, every partition
served again within a bound, no sidecar died.

Fault classes, each run ``--nemesis-repeat`` times (5): a sidecar cut from the backend but
reachable by clients (30 s; for good), cut from its clients and peers but not from the backend, the
cluster split minority/majority, a slow backend link, a flapping backend link, a backend broker
isolated from the other two (3-broker backend), a single sidecar cut from its backend; a seeded
random schedule of them (``--nemesis-minutes``, ``--nemesis-seed``: a failure prints the seed);
the checker failing on a deliberately broken build (the lease switched off); a planned handover
(rolling restart, a fourth sidecar joining) keeping delivery counts, poison records reaching their
limit.

Bounds for "served again": 15 s after a takeover or a heal where only backend links failed (the
must-show's bound); 75 s where client links failed — a client notices a silently cut broker only at
its own request timeout (librdkafka's socket.timeout.ms: 60 s; the asyncio client's 30 s) and TCP
resumes a stalled connection at its next retransmission.

Opt-in: ``make test-nemesis`` (root, iproute2, iptables; ~2-3 minutes per run on a quiet machine);
``make nemesis-schedule MINUTES=30 SEED=...``.
"""

from __future__ import annotations

import random
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from kshare_sidecar.testing.nemesis import History, check
from tests.e2e.nemesis_history import log_time
from tests.e2e.nemesis_lab import NemesisLab, Run, Settings
from tests.e2e.nemesis_schedule import schedule
from tests.e2e.netlab import available

WHY = available() or (None if shutil.which("iptables") else "needs iptables")
pytestmark = [pytest.mark.kafka, pytest.mark.optin("nemesis"), pytest.mark.skipif(WHY is not None, reason=str(WHY))]

BACKEND_BOUND_S = 15.0
CLIENT_BOUND_S = 75.0
FAULT_S = 30.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "round" in metafunc.fixturenames:
        repeat = metafunc.config.getoption("--nemesis-repeat", default=5)
        metafunc.parametrize("round", range(1, repeat + 1))


class Labs:
    """One lab at a time (a 3-broker backend is three JVMs: the machine is shared)."""

    def __init__(self, root: Path) -> None:
        self.root, self.current, self.brokers = root, None, 0

    def get(self, brokers: int = 1, sidecars: int = 3) -> NemesisLab:
        key = (brokers, sidecars)
        if self.current is None or self.brokers != key:
            self.close()
            self.current = NemesisLab(self.root / f"lab-{brokers}b-{sidecars}s-{int(time.time())}",
                                      Settings(brokers=brokers, sidecars=sidecars)).__enter__()
            self.brokers = key
        return self.current

    def close(self) -> None:
        if self.current is not None:
            lab, self.current = self.current, None
            lab.close()
            assert lab.lab.leftovers() == [], "the lab left namespaces or hosts files behind"


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    pool = Labs(tmp_path_factory.mktemp("nemesis"))
    yield pool
    pool.close()


def finish(run: Run, bound_s: float, label: str):
    """Stop the run, check it, print the figures, fail with the checker's report."""
    history = run.finish()
    report = check(history, unserved_bound_s=bound_s)
    print(f"\n[nemesis] {label}: {report.text()}")
    assert report.ok, f"{label}: {report.text()} (logs: {run.dir})"
    return history, report


def steady(run: Run, seconds: float = 15) -> None:
    run.start()
    time.sleep(seconds)


# -------------------------------------------------------------------------- sidecar cut from backend
def lapse_times(run: Run, n: int) -> list[float]:
    """When sidecar ``n`` stopped serving (its lease lapsed), from its log."""
    out = []
    for line in run.sidecar_log(n).splitlines():
        m = re.match(r"(\S+ \S+) ERROR kshare.cluster: cluster \S+: node \d+ stopped serving", line)
        if m:
            out.append(log_time(m.group(1)))
    return out


def takeovers_from(history: History, node: int, after: float) -> dict[int, float]:
    """State partitions ``node`` held at ``after`` and when another sidecar took each over."""
    out = {}
    for sp, tenures in history.tenures.items():
        held = [t for t in tenures if t.node == node and t.start <= after and (t.end is None or t.end > after)]
        nxt = [t for t in tenures if t.start > after and t.node != node]
        if held and nxt:
            out[sp] = nxt[0].start
    return out


def assert_no_zombie(run: Run, history: History, n: int, cut_at: float) -> str:
    """The must-show: the cut sidecar stopped serving before anyone took its partitions over, and
    no client got a record from it after that (the asyncio clients name the sidecar)."""
    taken = takeovers_from(history, n, cut_at)
    assert taken, f"nobody took over the partitions of s{n}"
    lapses = [t for t in lapse_times(run, n) if t > cut_at]
    assert lapses, f"s{n} never stopped serving: {run.sidecar_log(n)[-2000:]}"
    assert lapses[0] < min(taken.values()), f"s{n} stopped serving at {lapses[0]:.3f}, after a takeover {taken}"
    late = [d for d in history.deliveries if d.node == n and d.t > lapses[0] + 1.0 and
            history.home.get(d.p) in taken]
    assert not late, f"s{n} handed out {len(late)} records after it stopped serving, e.g. {late[:3]}"
    return (f"s{n} stopped serving {lapses[0] - cut_at:.1f} s after the cut, "
            f"{min(taken.values()) - lapses[0]:.1f} s before the first takeover of its partitions {sorted(taken)}")


def test_sidecar_cut_from_backend_30s(labs, round):
    nl = labs.get()
    run = nl.run(f"cut-backend-{round}")
    steady(run)
    fault = run.cut_from_backend(1)
    time.sleep(FAULT_S)
    run.heal()
    run.drain(400)
    history, report = finish(run, BACKEND_BOUND_S, f"s1 cut from the backend for 30 s (round {round})")
    print("[nemesis] " + assert_no_zombie(run, history, 1, fault.started))


def test_sidecar_cut_from_backend_for_good(labs, round):
    nl = labs.get()
    run = nl.run(f"cut-for-good-{round}")
    steady(run)
    fault = run.cut_from_backend(1)
    run.drain(400)  # the others serve everything, s1 never comes back before the end
    history, report = finish(run, BACKEND_BOUND_S, f"s1 cut from the backend for good (round {round})")
    print("[nemesis] " + assert_no_zombie(run, history, 1, fault.started))


# ------------------------------------------------------------------------------------ other faults
def test_sidecar_cut_from_clients_and_peers(labs, round):
    run = labs.get().run(f"cut-clients-{round}")
    steady(run)
    run.cut_from_clients_and_peers(1 + round % 3)
    time.sleep(FAULT_S)
    run.heal()
    run.drain(400)
    finish(run, CLIENT_BOUND_S, f"a sidecar cut from clients and peers for 30 s (round {round})")


def test_cluster_split_minority_majority(labs, round):
    nl = labs.get()
    run = nl.run(f"split-{round}")
    steady(run)
    run.split([f"s{1 + round % 3}", f"c{1 + round % 4}"])
    time.sleep(FAULT_S)
    run.heal()
    run.drain(400)
    finish(run, CLIENT_BOUND_S, f"split: one sidecar and one client | the rest, 30 s (round {round})")


def test_slow_backend_link(labs, round):
    run = labs.get().run(f"slow-{round}")
    steady(run)
    run.slow_backend(1 + round % 3, 400)
    time.sleep(FAULT_S)
    run.heal()
    run.drain(400)
    finish(run, BACKEND_BOUND_S, f"a sidecar's backend link slowed by 400 ms each way, 30 s (round {round})")


def test_flapping_backend_link(labs, round):
    run = labs.get().run(f"flap-{round}")
    steady(run)
    # down 8 s ± 30 %: sometimes shorter than the lease (8 s), sometimes longer
    run.flap(1 + round % 3, 8, 4, seed=round)
    time.sleep(45)
    run.heal()
    run.drain(400)
    finish(run, BACKEND_BOUND_S, f"a sidecar's backend link flapping for 45 s (round {round})")


def test_backend_broker_isolated(labs, round):
    run = labs.get(brokers=3).run(f"isolate-broker-{round}")
    steady(run)
    run.isolate_broker(1 + round % 3)
    time.sleep(FAULT_S)
    run.heal()
    run.drain(400)
    finish(run, BACKEND_BOUND_S, f"kafka-{1 + round % 3} isolated from the other brokers, 30 s (round {round})")


def test_single_sidecar_cut_from_backend(labs, round):
    """A single sidecar (no cluster.name) hands nothing out once its lease — its backend answering
    its probe — has run out, and serves again after the heal."""
    nl = labs.get(sidecars=1)
    run = nl.run(f"single-{round}", env={"KSHARE_CLUSTER_NAME": ""})
    steady(run)
    fault = run.cut_from_backend(1)
    time.sleep(FAULT_S)
    run.heal()
    run.drain(400)
    history, report = finish(run, BACKEND_BOUND_S, f"a single sidecar cut from its backend, 30 s (round {round})")
    lease_s = 8.0  # cluster.session.timeout.ms 10 s less the 2 s margin
    late = [d for d in history.deliveries if fault.started + lease_s + 2.0 < d.t < fault.healed]
    assert not late, f"{len(late)} records handed out after the lease ran out, e.g. {late[:3]}"


# ------------------------------------------------------------------------------ the checker can fail
#: a deliberately broken build: the lease switched off (a sidecar cut off from its backend goes on
#: serving, as before the lease existed) and so is the second defence behind it, the owner records
#: read from the state topic's tail (``lose``: a newer owner seen drops the partition at once). What
#: is left is the state topic's transactional fencing: the zombie learns of its loss only when a
#: state write of its own is fenced after the heal — the build measured on 2026-11-28.
BROKEN = [sys.executable, "-c", "import sys; import kshare_sidecar.cluster.lease as lease; "
                                "lease.Lease.valid = lambda self, now=None: self.renewals > 0; "
                                "lease.Lease.check = lambda self, now=None: False; "
                                "import kshare_sidecar.persist.cluster as pc; "
                                "pc.ClusterOwnership.lose = lambda self, p, newer: None; "
                                "sys.argv[0] = 'kshare'; from kshare_sidecar.cli import main; main()"]


def test_the_checker_fails_on_a_broken_build(labs):
    """The broken build, s1 cut from the backend for 30 s. Its signal is the must-show it breaks:
    "every partition served by someone within 15 s of the takeover". Without the lease s1 goes on
    naming itself leader, its consumers keep asking it, and it cannot serve them (it reads nothing
    from its cut backend; their acknowledgements wait out the 30 s state-write timeout) — while the
    sidecars that took its partitions over are asked by no one. A zombie delivery or a double hold
    needs records the cut sidecar already holds in memory to hand out, which a consumer that keeps
    up leaves it none of; the checker's rules for those are proven on made-up histories
    (tests/unit/testing/test_nemesis_checker.py), and any this run finds are printed too."""
    run = labs.get().run("broken", sidecar_argv=BROKEN)
    steady(run)
    fault = run.cut_from_backend(1)
    time.sleep(FAULT_S)
    run.heal()
    run.drain(240)
    history = run.finish()
    report = check(history, unserved_bound_s=BACKEND_BOUND_S)
    print(f"\n[nemesis] the lease and the owner-record tail switched off, s1 cut from the backend for 30 s: "
          f"{report.text()}")
    assert not report.ok, "the checker found nothing wrong with a sidecar that serves without its lease"
    taken = takeovers_from(history, 1, fault.started)
    assert taken, "nobody took over the partitions of s1"
    late = [v for v in report.violations if v.startswith("unserved") and "after the takeover" in v]
    assert late, f"no partition left unserved past {BACKEND_BOUND_S} s after the takeover: {report.violations}"
    worse = [v for v in report.violations if any(k in v for k in ("held twice", "zombie", "count went down",
                                                                    "count repeated"))]
    print(f"[nemesis] the broken build: {len(late)} partitions unserved after the takeover of s1's "
          f"{sorted(taken)}; zombie / double-hold / count findings: {worse or 'none'}")


# ----------------------------------------------------------------------------------- the schedule
def test_seeded_schedule(labs, request):
    seed = request.config.getoption("--nemesis-seed", default=None)
    seed = random.randrange(1 << 31) if seed is None else seed
    minutes = request.config.getoption("--nemesis-minutes", default=3.0)
    brokers = request.config.getoption("--nemesis-brokers", default=1)
    print(f"\n[nemesis] seeded schedule: seed {seed}, {minutes} minutes, {brokers} broker(s); replay with "
          f"make nemesis-schedule MINUTES={minutes:g} SEED={seed}")
    run = labs.get(brokers=brokers).run(f"schedule-{seed}")
    steady(run)
    timeline = schedule(run, seed, minutes, print)
    run.heal()
    run.drain(600)
    history = run.finish()
    report = check(history, unserved_bound_s=CLIENT_BOUND_S)
    print(f"[nemesis] schedule seed {seed}: {len(timeline)} steps; {report.text()}")
    assert report.ok, f"seed {seed} (replay: make nemesis-schedule MINUTES={minutes:g} SEED={seed}): " \
                      f"{report.text()}\ntimeline: {timeline}\nlogs: {run.dir}"


# ------------------------------------------------------------------------------- planned handovers
def test_planned_handover_keeps_delivery_counts(labs):
    """A rolling restart (SIGTERM, start again) of the three sidecars, then a fourth joining and
    leaving, under the load, with 2 % poison records that no consumer ever acknowledges: every
    planned move ends with its handover mark, no delivery count repeats across one (the checker),
    and every poison record comes back with its count up until the delivery limit archives it."""
    nl = labs.get(sidecars=4)
    run = nl.run("handover", hold_every=50)
    run.settings = Settings(brokers=1, sidecars=3, limit=5)  # the fourth joins later
    steady(run)
    moves = 0
    for n in (1, 2, 3):
        assert run.stop_sidecar(n, signal.SIGTERM) == 0, run.sidecar_log(n)[-3000:]
        run.start_sidecar(n)
        moves += 1
        time.sleep(10)
    run.start_sidecar(4)
    time.sleep(15)
    assert run.stop_sidecar(4, signal.SIGTERM) == 0, run.sidecar_log(4)[-3000:]
    del run.sidecars[4]
    run.drain(400)
    time.sleep(run.settings.lock_ms / 1000 + 5)  # the last poison records' locks run out: archived
    history, report = finish(run, BACKEND_BOUND_S, "rolling restart and a fourth sidecar, 2 % poison")
    planned = sum(1 for ts in history.tenures.values() for t in ts if t.planned)
    assert planned >= moves, f"only {planned} handover marks in the state topic"
    parts, limit = run.settings.partitions, run.settings.limit
    poison: dict[tuple[int, int], list[int]] = {}
    for d in history.deliveries:  # key i went to partition i % parts at offset i // parts
        if (d.o * parts + d.p) % run.hold_every == 0:
            poison.setdefault((d.p, d.o), []).append(d.dc)
    done = {k: sorted(v) for k, v in poison.items() if max(v) >= limit}
    assert done, "no poison record reached the delivery limit"
    for key, counts in done.items():
        assert counts == list(range(1, limit + 1)), f"poison record {key}: delivery counts {counts}"
    held = done
    print(f"[nemesis] {planned} planned handovers (marks in the state topic); {len(held)} poison records "
          f"delivered with counts 1..{run.settings.limit} and archived")
