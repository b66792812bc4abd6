"""``kshare consume``: a console share consumer (confluent-kafka's ShareConsumer).

Records are acknowledged explicitly: ACCEPT by default, RELEASE with ``--release`` (they come
back, with a higher delivery count) or REJECT with ``--reject`` (archived). With
``--max-messages`` the records fetched beyond the limit are released, not lost.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import typer

from .groups import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, fail

PROG = "kshare consume"


def consume(
    bootstrap_server: str = typer.Option(..., "--bootstrap-server", "-b", help="The sidecar, host:port[,...]"),
    group: str = typer.Option(..., "--group", "-g", help="Share group to join."),
    topic: list[str] = typer.Option(..., "--topic", "-t", help="Topic to consume; repeatable."),
    max_messages: int = typer.Option(None, "--max-messages", "-n", min=1, help="Stop after this many records."),
    release: bool = typer.Option(False, "--release", help="Acknowledge with RELEASE (redelivered later)."),
    reject: bool = typer.Option(False, "--reject", help="Acknowledge with REJECT (archived, never redelivered)."),
    idle_timeout: float = typer.Option(None, "--timeout", min=0.1,
                                       help="Stop when no record arrived for this many seconds."),
    print_key: bool = typer.Option(False, "--print-key", help="Print the key before the value."),
    print_offset: bool = typer.Option(False, "--print-offset", help="Print topic-partition@offset."),
    print_delivery_count: bool = typer.Option(False, "--print-delivery-count",
                                              help="Print how many times the record was delivered."),
    separator: str = typer.Option("\t", "--separator", help="Between printed fields."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per record (all fields)."),
    prop: list[str] = typer.Option(None, "--property", "-X", help="Consumer property KEY=VALUE; repeatable."),
) -> None:
    """Consume records with a share group and print them; acknowledges each one."""
    if release and reject:
        fail(PROG, "choose one of --release and --reject")
    extra = {}
    for p in prop or []:
        k, sep, v = p.partition("=")
        if not sep or not k:
            fail(PROG, f"bad --property {p!r}: expected KEY=VALUE")
        extra[k] = v
    try:
        from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
    except ImportError:
        fail(PROG, "confluent-kafka >= 2.15 is required: pip install 'confluent-kafka>=2.15'", EXIT_FAILED)
    ack = AcknowledgeType.RELEASE if release else AcknowledgeType.REJECT if reject else AcknowledgeType.ACCEPT
    try:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap_server, "group.id": group,
                                  "share.acknowledgement.mode": "explicit", "log_level": 3, **extra})
    except (KafkaException, ValueError, TypeError) as exc:
        fail(PROG, f"cannot create the share consumer: {exc}")
    stop = {"now": False}

    def on_signal(signum, frame) -> None:
        stop["now"] = True

    previous = signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    count, code = 0, EXIT_OK
    last = time.monotonic()
    out = sys.stdout
    try:
        consumer.subscribe(list(topic))
        while not stop["now"]:
            if max_messages is not None and count >= max_messages:
                break
            if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                break
            batch = consumer.poll(0.5)
            for msg in batch:
                err = msg.error()
                if err:
                    if err.fatal() or not err.retriable():
                        raise KafkaException(err)
                    continue
                last = time.monotonic()
                if stop["now"] or (max_messages is not None and count >= max_messages):
                    consumer.acknowledge(msg, AcknowledgeType.RELEASE)
                    continue
                _print(out, msg, as_json, print_key, print_offset, print_delivery_count, separator)
                consumer.acknowledge(msg, ack)
                count += 1
            out.flush()
        consumer.commit_sync(10)
    except KafkaException as exc:
        typer.echo(f"{PROG}: error: {exc.args[0].str() if exc.args else exc}", err=True)
        code = EXIT_UNREACHABLE if "transport" in str(exc).lower() else EXIT_FAILED
    finally:
        signal.signal(signal.SIGINT, previous)
        try:
            consumer.close()
        except Exception:  # noqa: BLE001 - closing after an error is best effort
            pass
    typer.echo(f"Processed a total of {count} messages", err=True)
    raise typer.Exit(code)


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


def _print(out, msg, as_json, print_key, print_offset, print_delivery_count, sep) -> None:
    if as_json:
        out.write(json.dumps({"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                              "key": None if msg.key() is None else _text(msg.key()), "value": _text(msg.value()),
                              "delivery_count": msg.delivery_count(), "timestamp": msg.timestamp()[1]}) + "\n")
        return
    fields = []
    if print_offset:
        fields.append(f"{msg.topic()}-{msg.partition()}@{msg.offset()}")
    if print_delivery_count:
        fields.append(f"delivery:{msg.delivery_count()}")
    if print_key:
        fields.append(_text(msg.key()))
    fields.append(_text(msg.value()))
    out.write(sep.join(fields) + "\n")
