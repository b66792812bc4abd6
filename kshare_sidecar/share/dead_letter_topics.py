"""Which topics accept dead-letter records: KIP-1191's topic opt-in, kept by kshare where the
backend cannot keep it (docs/extensions.md, "The topic opt-in").

Kafka 4.4 writes a share group's dead-letter records only to a topic whose config says
``errors.deadletterqueue.group.enable=true``. A backend before 4.4 refuses that topic config
(CreateTopics and IncrementalAlterConfigs answer INVALID_CONFIG for an unknown name), so the
sidecar keeps it itself: the key is taken out of a CreateTopics or IncrementalAlterConfigs that
passes through the sidecar (passthrough/dlqoptin.py), the rest goes to the backend, and the value is
recorded here once the backend accepted the rest; DescribeConfigs of the topic through the
sidecar shows it. ``deadletter.enabled.topics`` lists topics that opt in from the start (topics
created elsewhere, and opt-ins that must outlive a restart: what is recorded here is held in
memory). On a backend that holds the key (Kafka 4.4 and later) the backend's value is used and
nothing is recorded here.
"""

from __future__ import annotations

from collections.abc import Iterable

GROUP_ENABLE = "errors.deadletterqueue.group.enable"
DOC = ("When set to true, this topic may be used as a dead-letter queue topic by share groups "
       "(errors.deadletterqueue.topic.name).")


def parse_bool(value: str | None) -> bool | None:
    """Kafka's BOOLEAN parse: ``true``/``false`` in any case; None for anything else."""
    text = (value or "").strip().lower()
    return True if text == "true" else False if text == "false" else None


class DeadLetterTopics:
    """Opt-ins recorded by this sidecar, over the configured ``deadletter.enabled.topics``."""

    def __init__(self, configured: Iterable[str] = ()) -> None:
        self.configured = frozenset(configured)
        self._recorded: dict[str, bool] = {}
        #: None until the backend was seen to hold (True) or refuse (False) the topic config
        self.backend_holds_key: bool | None = None

    def record(self, topic: str, enabled: bool | None) -> None:
        """The topic's opt-in was set (``True``/``False``) or deleted (``None``: back to the default)."""
        if enabled is None:
            self._recorded.pop(topic, None)
        else:
            self._recorded[topic] = enabled

    def forget(self, topic: str) -> None:
        """The topic was deleted: a topic of the same name created later starts without the opt-in."""
        self._recorded.pop(topic, None)

    def enabled(self, topic: str) -> bool:
        return self._recorded.get(topic, topic in self.configured)

    def explicit(self, topic: str) -> bool:
        """Whether the opt-in is set for this topic (not the default): the describe's source."""
        return topic in self._recorded or topic in self.configured
