"""The capacity model (kshare_sidecar/capacity.py): its arithmetic and its limits."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kshare_sidecar.capacity import UnitCosts, Workload, plan

COSTS = UnitCosts(cpu_us_per_share_fetch=0.0, cpu_s_per_1m_records_100b=2.0, cpu_s_per_1m_records_1kib=4.0,
                  cluster_record_cost_growth=0.0,
                  cpu_us_per_heartbeat=500,
                  idle_cpu_share=0.0, serving_cpu_share=0.0, fetching_cpu_share=0.0, rss_base_mb=60, bytes_per_share_partition=1000,
                  bytes_per_loaded_share_partition=1000, kb_per_member=4, read_cache_mb=0,
                  state_records_per_ack=1.0, startup_s=2, replay_s_per_10k_share_partitions=0.5)


def test_cpu_per_record_is_interpolated_by_size():
    assert COSTS.cpu_s_per_1m_records(100) == 2.0
    assert COSTS.cpu_s_per_1m_records(1024) == 4.0
    assert COSTS.cpu_s_per_1m_records(562) == pytest.approx(3.0)


def test_cpu_decides_the_number_of_sidecars_with_a_spare():
    # 300k records/s of 1 KiB = 1.2 cores; at 0.6 of a core each, 2 carry it and 1 more is the spare
    p = plan(Workload(records_per_s=300_000), COSTS, target_utilization=0.6, spare=1)
    assert p.cores == pytest.approx(1.2)
    assert p.sidecars == 3
    assert p.cpu_share_per_sidecar == pytest.approx(0.4)
    assert p.cpu_share_after_failure == pytest.approx(0.6)
    assert plan(Workload(records_per_s=300_000), COSTS, target_utilization=0.6, spare=0).sidecars == 2


def test_each_share_fetch_costs_its_own_cpu_beside_the_records():
    costs = UnitCosts(**{**COSTS.__dict__, "cpu_us_per_share_fetch": 400.0})
    # 10k records/s of 1 KiB: 0.04 cores for the records; in ShareFetches of 5 records, 2,000/s
    # at 400 µs each are 0.8 cores more; of 500 records, 20/s: 0.008
    small = plan(Workload(records_per_s=10_000, records_per_fetch=5), costs, spare=0)
    large = plan(Workload(records_per_s=10_000, records_per_fetch=500), costs, spare=0)
    assert small.breakdown["records_cpu_cores"] == pytest.approx(0.04 + 0.8)
    assert large.breakdown["records_cpu_cores"] == pytest.approx(0.04 + 0.008)
    assert small.breakdown["share_fetches_per_s"] == 2000
    assert small.sidecars == 2 and large.sidecars == 1


def test_heartbeats_count_members_over_their_interval():
    p = plan(Workload(records_per_s=0, members=2000), COSTS, spare=0)
    assert p.heartbeats_per_s == 400
    assert p.breakdown["heartbeat_cpu_cores"] == pytest.approx(0.2)
    assert plan(Workload(records_per_s=0, members=2000, heartbeat_interval_ms=10_000), COSTS,
                spare=0).heartbeats_per_s == 200


def test_a_serving_sidecar_pays_a_floor_whatever_its_request_rate():
    import dataclasses

    floored = dataclasses.replace(COSTS, idle_cpu_share=0.005, serving_cpu_share=0.01, fetching_cpu_share=0.02)
    quiet = plan(Workload(records_per_s=0), floored, spare=0)
    heartbeating = plan(Workload(records_per_s=0, members=100), floored, spare=0)  # 20 heartbeats/s
    fetching = plan(Workload(records_per_s=1000, records_per_fetch=500, members=100), floored, spare=0)
    assert quiet.cores == pytest.approx(0.005)
    assert heartbeating.cores == pytest.approx(0.005 + 0.01 + 20 * 500e-6)
    assert fetching.cores == pytest.approx(0.005 + 0.01 + 0.02 + 20 * 500e-6 + 1000 * 4.0 / 1e6)
    assert fetching.breakdown["light_load_floor_cores"] == pytest.approx(0.03)
    # every sidecar serving the workload pays it: three sidecars, three floors
    three = plan(Workload(records_per_s=300_000, members=100), floored, target_utilization=0.6, spare=1)
    assert three.sidecars == 4
    assert three.breakdown["light_load_floor_cores"] == pytest.approx(4 * 0.03)


def test_memory_splits_state_over_the_sidecars_and_a_limit_adds_sidecars():
    w = Workload(records_per_s=0, share_partitions=100_000, active_share_partitions=10_000, members=1000)
    one = plan(w, COSTS, spare=0)
    shared = (100_000 * 1000 + 10_000 * 1000 + 1000 * 4 * 1024) / 2**20
    assert one.sidecars == 1 and one.memory_mb_per_sidecar == pytest.approx(60 + shared, abs=0.1)
    limited = plan(w, COSTS, spare=0, memory_limit_mb=60 + shared / 2 + 1)
    assert limited.sidecars == 2


def test_state_writes_follow_acknowledged_fetches():
    p = plan(Workload(records_per_s=10_000, records_per_fetch=500, partitions_per_fetch=2), COSTS, spare=0)
    assert p.state_records_per_s == 40  # 20 fetches/s, each acknowledging 2 share-partitions


def test_recovery_is_start_up_plus_the_replay_of_a_sidecar_s_share():
    p = plan(Workload(records_per_s=0, share_partitions=100_000), COSTS, spare=0)
    assert p.recovery_s_restart == pytest.approx(2 + 5.0)
    assert p.recovery_s_takeover == pytest.approx(5.0)


def test_bad_targets_are_refused():
    with pytest.raises(ValueError):
        plan(Workload(records_per_s=1), COSTS, target_utilization=0)
    with pytest.raises(ValueError):
        plan(Workload(records_per_s=1), COSTS, spare=-1)


def test_the_cli_prints_a_plan_and_json():
    from kshare_sidecar.cli import app

    out = CliRunner().invoke(app, ["capacity", "--records-per-second", "50000", "--share-partitions", "100000",
                                   "--members", "2000"])
    assert out.exit_code == 0, out.output
    assert "sidecars:" in out.output and "memory:" in out.output
    js = CliRunner().invoke(app, ["capacity", "--records-per-second", "1000", "--json"])
    assert js.exit_code == 0 and '"sidecars"' in js.output
    bad = CliRunner().invoke(app, ["capacity", "--records-per-second", "-5"])
    assert bad.exit_code != 0


def test_a_clusters_records_cost_more_per_sidecar_up_to_what_was_measured():
    import dataclasses

    growing = dataclasses.replace(COSTS, cluster_record_cost_growth=0.25, cluster_growth_measured_up_to=3)
    assert [growing.cluster_factor(n) for n in (1, 2, 3, 4, 10)] == [1.0, 1.25, 1.5, 1.5, 1.5]
    # 300k records/s of 1 KiB = 1.2 cores on one sidecar; on three 1.8, 0.6 each: just fits with no spare
    p = plan(Workload(records_per_s=300_000), growing, target_utilization=0.6, spare=0)
    assert p.sidecars == 3 and p.cores == pytest.approx(1.8)
    # a workload no number of sidecars carries under the target still ends (at 10,000)
    assert plan(Workload(records_per_s=1e12), growing, spare=0).sidecars == 10_000
