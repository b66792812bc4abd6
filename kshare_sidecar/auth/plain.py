"""SASL PLAIN (RFC 4616), server side, with Kafka's PlainSaslServer rules and messages."""

from __future__ import annotations


class PlainInvalid(Exception):
    """Malformed token or empty user/password: Kafka answers with its generic message."""


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """``[authzid] NUL authcid NUL passwd`` → (authzid, username, password)."""
    try:
        text = token.decode()
    except UnicodeDecodeError:
        raise PlainInvalid("Invalid SASL/PLAIN response: not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise PlainInvalid(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    authzid, username, password = parts
    if not username:
        raise PlainInvalid("Authentication failed: username not specified")
    if not password:
        raise PlainInvalid("Authentication failed: password not specified")
    return authzid, username, password
