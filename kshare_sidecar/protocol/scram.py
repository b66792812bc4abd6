"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): the math both sides share, and the client.

Why in protocol/: the sidecar is a SCRAM client towards the backend (``backend/sasl.py``: a
delegation token's id and HMAC with Kafka's ``tokenauth`` extension) and a SCRAM server for its
own clients (``auth/scram.py``); both need the same hashes, key derivation and message grammar,
and neither layer may import the other. Sans-I/O, standard library only.

Errors: :class:`ScramInvalid` (a malformed exchange, a wrong proof; never with a password or a
key in its text).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

from .constants import SCRAM_MECHANISMS

#: hashlib's name of each SCRAM mechanism's hash (Kafka offers these two)
HASHES = dict(zip(SCRAM_MECHANISMS, ("sha256", "sha512"), strict=True))
#: Kafka's ScramMechanism.minIterations for both mechanisms.
MIN_ITERATIONS = 4096

B64 = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)?$")


class ScramInvalid(Exception):
    """Malformed exchange, unknown user or wrong proof: the client gets Kafka's generic message."""


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) = PBKDF2 with HMAC-H; Kafka uses the UTF-8 bytes (no SASLprep)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def keyed_hash(mechanism: str, key: bytes, data: bytes) -> bytes:
    """HMAC(key, data) with the mechanism's hash."""
    return hmac.new(key, data, HASHES[mechanism]).digest()


def stored_key(mechanism: str, client_key: bytes) -> bytes:
    """H(ClientKey): what a server keeps and checks a proof against."""
    return hashlib.new(HASHES[mechanism], client_key).digest()


def _saslname_encode(value: str) -> str:
    return value.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """The client side, as Kafka's ScramSaslClient writes it: gs2 header ``n,,`` (no channel
    binding, no authorization id), then ``n=user,r=nonce`` and the extensions — Kafka's only one is
    ``tokenauth=true``: the user name is a delegation token's id and the password its HMAC
    (base64), and the broker authenticates the token's *owner* (KIP-48).

    Why our own and not aiokafka's (used for the sidecar's own SCRAM login): aiokafka's client
    sends no extensions. Sans-I/O: ``first()`` → client-first; ``final(server_first)`` →
    client-final (PBKDF2: run it off the event loop); ``verify(server_final)`` checks the server's
    signature. Errors are :class:`ScramInvalid` (never with the password or a key in the text).
    """

    def __init__(self, mechanism: str, username: str, password: str, *,
                 extensions: dict[str, str] | None = None, nonce: str | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        ext = "".join(f",{key}={value}" for key, value in (extensions or {}).items())
        self._first_bare = f"n={_saslname_encode(username)},r={self._nonce}{ext}"
        self._server_signature: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism})"

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            message = server_first.decode()
        except UnicodeDecodeError:
            raise ScramInvalid("server first message is not UTF-8") from None
        attrs = message.split(",")
        if attrs and attrs[0].startswith("m="):
            attrs = attrs[1:]
        if (len(attrs) < 3 or not attrs[0].startswith("r=") or not attrs[1].startswith("s=")
                or not attrs[2].startswith("i=") or not attrs[2][2:].isdigit() or not B64.match(attrs[1][2:])):
            raise ScramInvalid("invalid SCRAM server first message format")
        nonce, salt, iterations = attrs[0][2:], base64.b64decode(attrs[1][2:]), int(attrs[2][2:])
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise ScramInvalid("the server nonce does not extend the client nonce")
        if iterations < MIN_ITERATIONS:
            raise ScramInvalid(f"iterations {iterations} is less than the minimum {MIN_ITERATIONS}")
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._first_bare},{message},{without_proof}".encode()
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = keyed_hash(self.mechanism, salted, b"Client Key")
        signature = keyed_hash(self.mechanism, stored_key(self.mechanism, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = keyed_hash(self.mechanism, keyed_hash(self.mechanism, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise ScramInvalid(f"the server refused: {text[2:]}")
        if self._server_signature is None or not text.startswith("v=") or not B64.match(text[2:]):
            raise ScramInvalid("invalid SCRAM server final message")
        if not hmac.compare_digest(base64.b64decode(text[2:]), self._server_signature):
            raise ScramInvalid("the server's signature does not match (not the server that holds the credential)")
