"""The harness never hands out one port twice in a process: a broker given the same port for two
listeners fails its start-up (Kafka refuses it while formatting its storage), and the kernel may
give a port just closed to the next bind."""

from __future__ import annotations

import socket

from kshare_sidecar.testing.process import free_port


def test_ports_handed_out_are_distinct_and_free() -> None:
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as sock:  # free when handed out: it can be bound
        sock.bind(("127.0.0.1", ports[-1]))
