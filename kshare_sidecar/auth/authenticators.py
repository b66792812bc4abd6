"""Authenticator plugins: what checks a SASL client's credentials (hook ``register_authenticators``).

An authenticator answers two questions, both async so that one may ask a remote system:

- ``verify_plain(username, password) -> bool`` for SASL/PLAIN;
- ``scram_credential(mechanism, username) -> ScramCredential | None`` for SCRAM (the server
  needs the stored salt and keys, never the password).

It lists the ``mechanisms`` it can serve; the sidecar refuses to start when
``sasl.enabled.mechanisms`` asks for one it cannot. Raising :class:`CredentialsUnavailable` means
"could not check" (a store or backend that is down): the client gets Kafka's "credentials for user
could not be verified" and may retry; it is not counted as a wrong password.

Optional: ``scram_relay(mechanism)`` returns an object whose ``await step(token) -> (reply,
done)`` runs the whole SCRAM exchange somewhere else (``delegate`` relays it to the backend) and
whose ``username`` is set after the first message; it raises :class:`RelayRefused` with the
message the client gets. ``async start(mechanisms)`` is awaited once at start-up with the enabled
mechanisms (raise ``ConfigError`` for a configuration that cannot work).

The built-in ``static`` store is here; ``delegate`` (the backend checks PLAIN credentials and
SCRAM proofs) is in :mod:`.delegate`.
"""

from __future__ import annotations

import asyncio
import hmac
import sys
from pathlib import Path
from typing import Any, Protocol

from ..config import ConfigError
from .scram import HASHES, ScramCredential, make_credential, password_matches


class CredentialsUnavailable(Exception):
    """The authenticator could not check the credentials (not: they are wrong)."""


class RelayRefused(Exception):
    """The system a relayed exchange went to refused it: ``message`` for the client (that
    system's own), ``reason`` for the sidecar's log (never a secret)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message, self.reason = message, reason


class Authenticator(Protocol):
    mechanisms: frozenset[str]

    async def verify_plain(self, username: str, password: str) -> bool: ...

    async def scram_credential(self, mechanism: str, username: str) -> ScramCredential | None: ...

    async def close(self) -> None: ...


class StaticAuthenticator:
    """Users from ``sasl.credentials.file`` (development, tests, small fixed deployments).

    One user per line, ``#`` comments and blank lines ignored; a user name cannot contain ":".

    - ``alice:alice-secret`` — a password: PLAIN compares it, SCRAM credentials are derived at
      start-up (random salt, 4096 iterations) for both SCRAM mechanisms;
    - ``bob:SCRAM-SHA-512:salt=...,stored_key=...,server_key=...,iterations=8192`` — Kafka's own
      salted form (as ``kafka-configs --describe --entity-type users`` stores it; make one with
      ``python -m kshare_sidecar.auth.authenticators SCRAM-SHA-512 bob`` and the password on
      stdin). No password in the file; PLAIN still works for such a user (the password is checked
      against the stored keys). One line per mechanism.
    """

    mechanisms = frozenset({"PLAIN", *HASHES})

    def __init__(self, path: str) -> None:
        if not path:
            raise ConfigError("sasl.authenticator = 'static' needs sasl.credentials.file (lines user:password or "
                              "user:SCRAM-SHA-512:salt=...,stored_key=...,server_key=...,iterations=N)")
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"sasl.credentials.file = {path!r}: cannot read it: {exc.strerror}") from None
        self._passwords: dict[str, str] = {}
        self._scram: dict[tuple[str, str], ScramCredential] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, rest = line.partition(":")
            where = f"sasl.credentials.file = {path!r} line {number}"
            if not sep or not user or not rest:
                raise ConfigError(f"{where}: expected user:password or user:SCRAM-SHA-nnn:salt=...")
            mechanism, _, cred = rest.partition(":")
            if mechanism in HASHES and cred.startswith("salt="):
                try:
                    self._scram[(mechanism, user)] = ScramCredential.from_kafka(cred)
                except ValueError as exc:
                    raise ConfigError(f"{where}: {exc}") from None
            else:
                if user in self._passwords:
                    raise ConfigError(f"{where}: user {user!r} has a password twice")
                self._passwords[user] = rest
        for user, password in self._passwords.items():
            for mechanism in HASHES:
                self._scram.setdefault((mechanism, user), make_credential(mechanism, password))
        if not self._passwords and not self._scram:
            raise ConfigError(f"sasl.credentials.file = {path!r}: no users in it")

    def __repr__(self) -> str:
        return f"StaticAuthenticator({len(self._passwords)} passwords, {len(self._scram)} SCRAM credentials)"

    @property
    def users(self) -> set[str]:
        return set(self._passwords) | {u for _, u in self._scram}

    async def verify_plain(self, username: str, password: str) -> bool:
        known = self._passwords.get(username)
        if known is not None:
            return hmac.compare_digest(known.encode(), password.encode())
        for mechanism in HASHES:
            cred = self._scram.get((mechanism, username))
            if cred is not None:  # PBKDF2: off the event loop
                return await asyncio.to_thread(password_matches, mechanism, cred, password)
        return False

    async def scram_credential(self, mechanism: str, username: str) -> ScramCredential | None:
        return self._scram.get((mechanism, username))

    async def close(self) -> None:
        return None


def static_authenticator(*, config: Any, **_: Any) -> StaticAuthenticator:
    return StaticAuthenticator(config.listener_security.sasl_credentials_file)


def main(argv: list[str] | None = None) -> int:
    """``python -m kshare_sidecar.auth.authenticators SCRAM-SHA-512 alice [iterations]`` (password
    on stdin) prints a ``sasl.credentials.file`` line with Kafka's salted form."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3) or args[0] not in HASHES:
        print("usage: python -m kshare_sidecar.auth.authenticators SCRAM-SHA-256|SCRAM-SHA-512 USER [ITERATIONS] "
              "< password", file=sys.stderr)
        return 2
    password = sys.stdin.readline().rstrip("\n")
    cred = make_credential(args[0], password, iterations=int(args[2]) if len(args) == 3 else 4096)
    print(f"{args[1]}:{args[0]}:{cred.to_kafka()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
