"""SCRAM-SHA-256 / SCRAM-SHA-512, server side (RFC 5802, RFC 7677), with Kafka's message rules.

Written here rather than taken from ``scramp`` (PyPI): its server asks for the credential
synchronously from inside message parsing, while ours come from an async authenticator plugin,
and Kafka's grammar (gs2 header "n" only, ``a=`` must equal the user, extensions allowed, no
SASLprep of the password) and its error split (a message for the client vs. the generic
"invalid credentials") are easier to keep exactly in a small state machine. Tested against the
RFC 7677 / RFC 5802 vectors (tests/unit/auth/test_scram.py).

Errors: :class:`ScramInvalid` means "do not tell the client why" (Kafka's SaslException: the
client gets the generic message); :class:`ScramRefused` carries a message meant for the client
(Kafka's SaslAuthenticationException). The hashes, the key derivation and the client side are
``protocol/scram.py``'s, shared with the backend connections' SCRAM client.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from dataclasses import dataclass, field

from ..protocol.scram import (
    B64,
    HASHES,
    MIN_ITERATIONS,
    ScramInvalid,
    keyed_hash,
    salted_password,
    stored_key,
)

__all__ = ["HASHES", "MIN_ITERATIONS", "ScramCredential", "ScramInvalid", "ScramRefused", "ScramServer",
           "make_credential", "password_matches"]

_PRINTABLE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # %x21-7E except ","
_EXTENSION = re.compile(r"^[A-Za-z]+=[\x01-\x2b\x2d-\x3c\x3e-\x7f]+$")


class ScramRefused(Exception):
    """A refusal whose message is meant for the client (authorization id ≠ user)."""


@dataclass(frozen=True)
class ScramCredential:
    """What a server stores per user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_kafka(self) -> str:
        """Kafka's own text form (``ScramCredentialUtils``): salt=..,stored_key=..,server_key=..,iterations=N."""
        salt, stored, server = (base64.b64encode(v).decode() for v in (self.salt, self.stored_key, self.server_key))
        return f"salt={salt},stored_key={stored},server_key={server},iterations={self.iterations}"

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        """Parse :meth:`to_kafka`'s form; ValueError names what is wrong (never echoes keys)."""
        parts = dict(p.split("=", 1) for p in text.strip().split(",") if "=" in p)
        missing = {"salt", "stored_key", "server_key", "iterations"} - parts.keys()
        if missing:
            raise ValueError(f"SCRAM credential lacks {', '.join(sorted(missing))}")
        try:
            salt, stored, server = (base64.b64decode(parts[k], validate=True) for k in ("salt", "stored_key", "server_key"))
            iterations = int(parts["iterations"])
        except (binascii.Error, ValueError):
            raise ValueError("SCRAM credential: salt/stored_key/server_key must be base64, iterations a number") from None
        return cls(salt, stored, server, iterations)


def make_credential(mechanism: str, password: str, *, salt: bytes | None = None,
                    iterations: int = MIN_ITERATIONS) -> ScramCredential:
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = keyed_hash(mechanism, salted, b"Client Key")
    return ScramCredential(salt, stored_key(mechanism, client_key), keyed_hash(mechanism, salted, b"Server Key"),
                           iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` produces ``credential`` (lets a SCRAM-only user log in with PLAIN)."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    client_key = keyed_hash(mechanism, salted, b"Client Key")
    return hmac.compare_digest(stored_key(mechanism, client_key), credential.stored_key)


def _saslname(value: str) -> str:
    """RFC 5802 saslname: "=2C" is ",", "=3D" is "=", any other "=" is malformed."""
    if re.search(r"=(?!2C|3D)", value) or not value:
        raise ScramInvalid("invalid saslname")
    return value.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange: ``client_first`` → user name; ``server_first(credential)``;
    ``client_final`` → the server-final message (authentication succeeded) or an exception."""

    def __init__(self, mechanism: str, *, nonce: str | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._server_nonce = nonce or secrets.token_urlsafe(24)
        self.username: str | None = None
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.complete = False

    def client_first(self, data: bytes) -> str:
        try:
            message = data.decode()
        except UnicodeDecodeError:
            raise ScramInvalid("client first message is not UTF-8") from None
        # gs2-header: Kafka supports "n" (no channel binding) only
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] != "n" or (parts[1] and not parts[1].startswith("a=")):
            raise ScramInvalid("invalid SCRAM client first message format")
        authzid = _saslname(parts[1][2:]) if parts[1] else ""
        self._gs2 = f"{parts[0]},{parts[1]},"
        bare = parts[2]
        attrs = bare.split(",")
        if attrs and attrs[0].startswith("m="):  # reserved-mext: Kafka's grammar allows and ignores it
            attrs = attrs[1:]
        if len(attrs) < 2 or not attrs[0].startswith("n=") or not attrs[1].startswith("r="):
            raise ScramInvalid("invalid SCRAM client first message format")
        username = _saslname(attrs[0][2:])
        client_nonce = attrs[1][2:]
        if not _PRINTABLE.match(client_nonce):
            raise ScramInvalid("invalid client nonce")
        if not all(_EXTENSION.match(a) for a in attrs[2:]):  # Kafka's grammar: ,ALPHA=VALUE
            raise ScramInvalid("invalid SCRAM client first message format")
        if authzid and authzid != username:
            raise ScramRefused("Authentication failed: Client requested an authorization id that is different "
                               "from username")
        self._client_first_bare, self._nonce = bare, client_nonce + self._server_nonce
        self.username = username
        return username

    def server_first(self, credential: ScramCredential) -> bytes:
        if credential.iterations < MIN_ITERATIONS:
            raise ScramInvalid(f"iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS}")
        self._credential = credential
        self._server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        return self._server_first.encode()

    def client_final(self, data: bytes) -> bytes:
        if self._credential is None:
            raise ScramInvalid("client final message before the server first message")
        try:
            message = data.decode()
        except UnicodeDecodeError:
            raise ScramInvalid("client final message is not UTF-8") from None
        without_proof, sep, proof_b64 = message.rpartition(",p=")
        attrs = without_proof.split(",")
        if (not sep or len(attrs) < 2 or not attrs[0].startswith("c=") or not attrs[1].startswith("r=")
                or not B64.match(proof_b64) or not B64.match(attrs[0][2:])):
            raise ScramInvalid("invalid SCRAM client final message format")
        if base64.b64decode(attrs[0][2:]) != self._gs2.encode():
            raise ScramInvalid("channel binding does not match the gs2 header")
        if attrs[1][2:] != self._nonce:
            raise ScramInvalid("invalid client nonce in the final client message")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred, self._credential = self._credential, None
        signature = keyed_hash(self.mechanism, cred.stored_key, auth_message)
        proof = base64.b64decode(proof_b64)
        if len(proof) != len(signature):
            raise ScramInvalid("invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(stored_key(self.mechanism, client_key), cred.stored_key):
            raise ScramInvalid("invalid client credentials")
        self.complete = True
        return b"v=" + base64.b64encode(keyed_hash(self.mechanism, cred.server_key, auth_message))
