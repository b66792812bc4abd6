"""Exceptions of the asyncio share consumer (one root, so callers can catch them all)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class ShareConsumerError(Exception):
    """Root of every error the share consumer raises or reports."""


class ConsumerStoppedError(ShareConsumerError):
    """The consumer was closed (or never started)."""


class GroupError(ShareConsumerError):
    """The group coordinator answered something a member cannot recover from (e.g. group
    authorization failed, group full, unsupported); the consumer stops fetching."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(code.name.upper() + (f": {message}" if message else ""))
        self.code = code


class AcknowledgementError(ShareConsumerError):
    """The broker refused an acknowledgement (per partition; e.g. INVALID_RECORD_STATE when the
    record's lock expired and it went to another member), or it could not be delivered."""

    def __init__(self, code: ErrorCode | None, message: str | None = None) -> None:
        name = "NOT_SENT" if code is None else getattr(code, "name", f"error {code}").upper()
        super().__init__(name + (f": {message}" if message else ""))
        self.code = code


class AuthenticationFailedError(ShareConsumerError):
    """The broker refused this consumer's SASL credentials (SASL_AUTHENTICATION_FAILED) — not
    retried, as in Kafka's clients: ``start()`` raises it, or (later) the next ``getmany``."""


class UnsupportedVersionError(ShareConsumerError):
    """The broker does not offer the API version a call needs (RENEW needs ShareAcknowledge v2)."""


class AckStateError(ShareConsumerError, ValueError):
    """The record is not acquired by this consumer (never was, already acknowledged, or its
    share session ended and the broker released it)."""
