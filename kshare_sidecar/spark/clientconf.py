"""Check the ``kafka.*`` pass-through settings with librdkafka itself, at ``load()``.

Before this check, a bad setting surfaced only at the first trigger, deep inside a query. Both
clients are built here without ``bootstrap.servers``, which makes librdkafka validate every
property (names, values, and which client accepts it) without opening a connection; they are
closed at once. A failure names the option the user wrote and, where one prefix would have
worked, says which (``isolation.level`` exists for the readers but not for a share consumer).

confluent-kafka is imported here too, so a driver without it fails at ``load()`` with the
install hint instead of at the first trigger with ``ModuleNotFoundError``.
"""

from __future__ import annotations

import logging
import re

from .options import PREFIX_BOTH, PREFIX_READ, PREFIX_SHARE, ClientSetting, OptionError, SourceOptions

INSTALL_HINT = "pip install 'kshare-sidecar[spark]' (or confluent-kafka>=2.16,<3) on the driver and executors"

_QUIET = logging.getLogger("kshare.spark.clientconf")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

#: librdkafka names the property it rejects in double quotes or backticks.
_PROPERTY = re.compile(r"[\"`]([a-z0-9_.\-]+)[\"`]", re.IGNORECASE)


def require_confluent_kafka():
    try:
        import confluent_kafka
    except ImportError as exc:
        raise OptionError(f"the kshare source needs confluent-kafka ({exc}): {INSTALL_HINT}") from None
    if not hasattr(confluent_kafka, "ShareConsumer"):
        raise OptionError(f"the kshare source needs confluent-kafka 2.16 or later with ShareConsumer "
                          f"(found {confluent_kafka.version()[0]}): {INSTALL_HINT}")
    return confluent_kafka


def validate_clients(opts: SourceOptions) -> None:
    """Raise :class:`OptionError` naming the option when librdkafka rejects a client setting."""
    ck = require_confluent_kafka()
    clients = {"share": (ck.ShareConsumer, {"group.id": "kshare-validate"}),
               "read": (ck.Consumer, {"group.id": "kshare-validate"})}
    checks = (("share", opts.share_consumer_config(with_bootstrap=False), opts.share_settings()),
              ("read", opts.plain_consumer_config(with_bootstrap=False), opts.read_settings()))
    for which, config, settings in checks:
        error = _error(clients[which][0], config)
        if error is not None:
            raise OptionError(_explain(error, settings, which, clients))


def _error(cls, config: dict) -> str | None:
    """librdkafka's complaint about ``config``, or None when a client can be built from it."""
    try:
        client = cls({**config, "logger": _QUIET})
    except Exception as exc:  # KafkaException (unknown property, bad value) or ValueError (not for this client)
        text = str(exc)
        if "str=" in text:  # KafkaError{code=...,str="..."}
            text = text.split("str=", 1)[1]
            text = text[:-1] if text.endswith("}") else text
            text = text[1:-1] if len(text) > 1 and text[0] == text[-1] == '"' else text
        return text
    client.close()
    return None


def _explain(error: str, settings: dict[str, ClientSetting], which: str, clients: dict) -> str:
    client = ("the driver's share consumer (kafka.share.* and kafka.*)" if which == "share"
              else "the executors' readers (kafka.read.* and kafka.*)")
    for name in _PROPERTY.findall(error):
        setting = settings.get(name)
        if setting is None:
            continue
        msg = f"option '{setting.option}' is not valid for {client}: {error}"
        both = not setting.option.startswith((PREFIX_SHARE, PREFIX_READ)) and setting.option.startswith(PREFIX_BOTH)
        other = "read" if which == "share" else "share"
        cls, base = clients[other]
        if both and _error(cls, {**base, name: setting.value}) is None:
            prefix = PREFIX_READ if other == "read" else PREFIX_SHARE
            whom = "the executors' readers" if other == "read" else "the driver's share consumer"
            msg += f". kafka.* settings go to both clients: '{prefix}{name}' gives it to {whom} only"
        return msg
    return f"kafka.* settings rejected by {client}: {error}"
