"""Delegation tokens per client principal (passthrough/tokens.py): made once, replaced ahead of expiry,
expired when idle and at shutdown, refusals remembered, the HMAC never in a repr or log line.

The backend is a small model of Kafka's DelegationTokenControlManager (create with an owner and
renewers, the granted expiry min(now + expiry.time.ms, now + max lifetime), expire by HMAC if the
caller is the owner or a renewer) behind the pool's ``call``; e2e against Kafka 3.9 is
tests/e2e/test_acl_parity.py."""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import secrets

import pytest
from kio.schema.create_delegation_token.v3.response import CreateDelegationTokenResponse
from kio.schema.errors import ErrorCode
from kio.schema.expire_delegation_token.v2.response import ExpireDelegationTokenResponse

from kshare_sidecar.passthrough import tokens as tokens_mod
from kshare_sidecar.passthrough.tokens import DelegationTokens, split_principal
from kshare_sidecar.backend.sasl import SaslError
from kshare_sidecar.backend.security import BackendSecurity
from kshare_sidecar.wire import codec

UTC = datetime.timezone.utc


class Controller:
    """Kafka's token rules, enough for the sidecar's use; ``refuse`` names owners without CREATE_TOKENS."""

    def __init__(self, expiry_ms: int = 86_400_000) -> None:
        self.expiry_ms = expiry_ms
        self.tokens: dict[bytes, dict] = {}
        self.refuse: set[str] = set()
        self.creates = 0
        self.requester = ("User", "kshare")
        self.versions = {38: (1, 3), 40: (1, 2)}
        self.brokers = {1: ("127.0.0.1", 1)}
        self.security = BackendSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username="kshare",
                                        password="k-pw")

    def version(self, api_key: int, highest: int) -> int:
        return min(highest, self.versions[api_key][1])

    def any_node(self) -> int:
        return 1

    async def call_payload(self, node, request) -> bytes:
        """What a broker sends: the answer's payload (header + body)."""
        return codec.encode_response(await self._answer(request), 7)[4:]

    async def _answer(self, request):
        await asyncio.sleep(0)
        now = datetime.datetime.now(UTC)
        if type(request).__api_key__ == 38:
            self.creates += 1
            owner = (request.owner_principal_type or "User", request.owner_principal_name or "kshare")
            empty = b""
            if f"{owner[0]}:{owner[1]}" in self.refuse:  # Kafka's error answer: timestamps -1
                never = datetime.datetime(1970, 1, 1, tzinfo=UTC) - datetime.timedelta(milliseconds=1)
                return CreateDelegationTokenResponse(
                    error_code=ErrorCode.delegation_token_authorization_failed, principal_type=owner[0],
                    principal_name=owner[1], token_requester_principal_type="User",
                    token_requester_principal_name="kshare", issue_timestamp=never, expiry_timestamp=never,
                    max_timestamp=never, token_id="", hmac=empty, throttle_time=datetime.timedelta(0))
            life = min(self.expiry_ms, int(request.max_lifetime.total_seconds() * 1000))
            hmac = secrets.token_bytes(64)
            token_id = secrets.token_urlsafe(16)
            expiry = now + datetime.timedelta(milliseconds=life)
            self.tokens[hmac] = {"owner": owner, "renewers": {(r.principal_type, r.principal_name)
                                                              for r in request.renewers}, "id": token_id}
            return CreateDelegationTokenResponse(
                error_code=ErrorCode.none, principal_type=owner[0], principal_name=owner[1],
                token_requester_principal_type=self.requester[0], token_requester_principal_name=self.requester[1],
                issue_timestamp=now, expiry_timestamp=expiry, max_timestamp=expiry, token_id=token_id, hmac=hmac,
                throttle_time=datetime.timedelta(0))
        assert type(request).__api_key__ == 40 and request.expiry_time_period.total_seconds() < 0
        info = self.tokens.get(bytes(request.hmac))
        if info is None:
            code = ErrorCode.delegation_token_not_found
        elif self.requester != info["owner"] and self.requester not in info["renewers"]:
            code = ErrorCode.delegation_token_owner_mismatch
        else:
            code = ErrorCode.none
            del self.tokens[bytes(request.hmac)]
        return ExpireDelegationTokenResponse(error_code=code, expiry_timestamp=now, throttle_time=datetime.timedelta(0))

    def owners(self) -> list[str]:
        return sorted(f"{t['owner'][0]}:{t['owner'][1]}" for t in self.tokens.values())


def manager(controller: Controller, *, max_lifetime_ms: int = 3_600_000, idle_ms: int = 60_000) -> DelegationTokens:
    tokens = DelegationTokens(controller, mechanism="SCRAM-SHA-512", max_lifetime_ms=max_lifetime_ms,  # type: ignore[arg-type]
                              idle_ms=idle_ms)
    tokens.renewer = ("User", "kshare")  # start() learns it from its own token
    return tokens


async def test_one_token_per_principal_even_for_concurrent_connections():
    controller = Controller()
    tokens = manager(controller)
    source = tokens.acquire("User:CN=svc-a,O=acme")
    got = await asyncio.gather(*(source.credentials() for _ in range(10)))
    assert len(set(got)) == 1 and controller.creates == 1
    token_id, hmac = got[0]
    info = controller.tokens[base64.b64decode(hmac)]
    assert info["owner"] == ("User", "CN=svc-a,O=acme") and info["id"] == token_id
    assert ("User", "kshare") in info["renewers"]  # so that the sidecar may expire it
    other = await tokens.acquire("User:alice").credentials()
    assert other != got[0] and controller.creates == 2
    await tokens.close()
    assert controller.tokens == {}  # every live token expired at shutdown


async def test_the_successor_is_made_ahead_and_taken_once_settled(monkeypatch):
    monkeypatch.setattr(tokens_mod, "SETTLE_S", 0.5)
    controller = Controller(expiry_ms=2000)  # the broker grants 2 s whatever is asked
    tokens = manager(controller)
    source = tokens.acquire("User:alice")
    first = await source.credentials()
    await asyncio.sleep(1.1)  # past the replacement point (half the life here): the successor is made
    assert controller.creates == 2
    assert await source.credentials() == first  # the successor has not settled (0.5 s): the old one, still valid
    await asyncio.sleep(0.55)
    second = await source.credentials()  # settled, and before 85 % of the old one's life
    assert second != first and controller.creates == 2
    assert controller.owners() == ["User:alice", "User:alice"]  # the replaced one expires by itself
    await tokens.close()


async def test_a_token_past_its_handout_time_is_replaced_at_once():
    controller = Controller(expiry_ms=1000)
    tokens = manager(controller)
    source = tokens.acquire("User:alice")
    source.release()  # no users: no successor in the background
    first = await source.credentials()
    await asyncio.sleep(0.9)  # past 85 % of its life
    assert await source.credentials() != first and controller.creates == 2
    await tokens.close()


async def test_a_refusal_is_remembered_briefly_and_names_the_acl(caplog):
    controller = Controller()
    controller.refuse.add("User:CN=svc-b,O=acme")
    tokens = manager(controller)
    source = tokens.acquire("User:CN=svc-b,O=acme")
    with pytest.raises(SaslError) as info:
        await source.credentials()
    assert "DELEGATION_TOKEN_AUTHORIZATION_FAILED" in str(info.value)
    assert "User:kshare needs CREATE_TOKENS on USER User:CN=svc-b,O=acme" in str(info.value)
    for _ in range(5):  # a client's retries: answered from memory, not five more CreateDelegationToken
        with pytest.raises(SaslError):
            await source.credentials()
    assert controller.creates == 1
    await tokens.close()


async def test_idle_principals_have_their_tokens_expired():
    controller = Controller()
    tokens = manager(controller, idle_ms=1000)
    tokens.idle_s = 0.05
    busy, idle = tokens.acquire("User:busy"), tokens.acquire("User:idle")
    await busy.credentials()
    await idle.credentials()
    idle.release()
    await asyncio.sleep(0.06)
    await tokens.sweep()
    assert controller.owners() == ["User:busy"]
    assert tokens.expired == 1
    await idle.credentials()  # it comes back: a fresh token
    assert controller.owners() == ["User:busy", "User:idle"]
    await tokens.close()


async def test_the_hmac_is_in_no_repr_and_no_log_line(caplog):
    caplog.set_level(logging.DEBUG)
    controller = Controller()
    tokens = manager(controller)
    source = tokens.acquire("User:alice")
    token_id, hmac = await source.credentials()
    security = tokens.token_security(source)
    text = " ".join([repr(tokens), repr(source), repr(security), security.describe(), caplog.text,
                     repr(tokens._entries["User:alice"])])
    assert hmac not in text and token_id in caplog.text  # the id is no secret (Kafka logs it too)
    assert security.token_auth and security.mechanism == "SCRAM-SHA-512" and security.username is None
    assert security.describe() == "SASL_SSL SCRAM-SHA-512 with a delegation token of User:alice"
    await tokens.close()


def test_principal_split():
    assert split_principal("User:CN=a,O=b:c") == ("User", "CN=a,O=b:c")
    with pytest.raises(tokens_mod.DelegationTokenError):
        split_principal("alice")


def test_an_answer_kio_cannot_read_still_gives_its_code_and_the_owner():
    """Kafka's CreateDelegationToken error answer has -1 timestamps; its error code and the owner it
    names (what the delegate relay asks a token-authenticated connection) are read without kio."""
    from kio.schema.create_delegation_token.v2.response import CreateDelegationTokenResponse as V2
    from kio.serial.readers import read_compact_string

    from kshare_sidecar.protocol.requests import leading_error_code

    never = datetime.datetime(1970, 1, 1, tzinfo=UTC) - datetime.timedelta(milliseconds=1)
    answer = V2(error_code=ErrorCode.delegation_token_request_not_allowed, principal_type="User",
                principal_name="CN=svc-a,O=acme", issue_timestamp=never, expiry_timestamp=never, max_timestamp=never,
                token_id="", hmac=b"", throttle_time=datetime.timedelta(0))
    payload = codec.encode_response(answer, 7)[4:]
    code, offset = leading_error_code(payload, V2)
    assert code == ErrorCode.delegation_token_request_not_allowed
    kind, size = read_compact_string(payload, offset)
    assert (kind, read_compact_string(payload, offset + size)[0]) == ("User", "CN=svc-a,O=acme")
