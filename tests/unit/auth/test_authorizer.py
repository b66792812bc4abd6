"""BackendAuthorizer's cache and exemptions (the DescribeAcls I/O replaced by a fake)."""

from __future__ import annotations

import asyncio

import pytest

from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.auth.acls import Acl, Op, Pattern, Permission, Res
from kshare_sidecar.auth.authorizer import AclsUnavailable, BackendAuthorizer, AuthorizerError


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def make(acls: dict[str, list[Acl]], clock: Clock, **kw) -> tuple[BackendAuthorizer, list[str]]:
    calls: list[str] = []
    az = BackendAuthorizer(BackendClients("127.0.0.1:1"), cache_ms=1000, clock=clock, **kw)

    async def describe(principal: str):
        calls.append(principal)
        if principal == "boom":
            raise AuthorizerError("no")
        return list(acls.get(principal, []))

    az._describe = describe  # type: ignore[method-assign]
    return az, calls


def read(principal: str, name: str = "g") -> Acl:
    return Acl(int(Res.GROUP), name, int(Pattern.LITERAL), principal, "*", int(Op.READ), int(Permission.ALLOW))


def test_principal_and_wildcard_acls_are_combined_and_cached():
    clock = Clock()
    az, calls = make({"User:alice": [read("User:alice")], "User:*": [read("User:*", "public")]}, clock)

    async def run():
        d = await az.decider("User:alice", "10.0.0.1", "SASL_SSL")
        assert d.allows(Op.READ, Res.GROUP, "g") and d.allows(Op.DESCRIBE, Res.GROUP, "public")
        assert not d.allows(Op.READ, Res.GROUP, "other")
        await az.decider("User:alice", "10.0.0.1", "SASL_SSL")
        assert sorted(calls) == ["User:*", "User:alice"]  # the second request used the cache
        clock.now = 5.0  # stale but within STALE_FACTOR: still served, the refresher renews it
        await az.decider("User:alice", "10.0.0.1", "SASL_SSL")
        assert len(calls) == 2
        clock.now = 50.0  # past STALE_FACTOR × cache: fetched again before answering
        await az.decider("User:alice", "10.0.0.1", "SASL_SSL")
        assert len(calls) == 4

    asyncio.run(run())


def test_exemptions_and_super_users():
    clock = Clock()
    az, calls = make({}, clock, super_users=frozenset({"User:admin"}))
    assert az.exempt("User:ANONYMOUS", "PLAINTEXT") and not az.exempt("User:ANONYMOUS", "SSL")
    assert az.exempt("User:admin", "SASL_SSL")
    strict, _ = make({}, clock, plaintext_anonymous=False)
    assert not strict.exempt("User:ANONYMOUS", "PLAINTEXT")

    async def run():
        d = await az.decider("User:admin", "h", "SASL_SSL")
        assert d.unrestricted and not calls
        d = await az.decider("User:bob", "h", "SASL_SSL")
        assert not d.allows(Op.DESCRIBE, Res.GROUP, "g")

    asyncio.run(run())


def test_no_acls_means_a_retriable_error_not_an_allow():
    az, _ = make({}, Clock())
    with pytest.raises(AclsUnavailable) as info:
        asyncio.run(az.acls("boom"))
    assert info.value.retriable


def _answer(code: int, resources=()) -> bytes:
    from kio.schema.describe_acls.v1 import response as r1

    from kshare_sidecar.wire import codec

    from kio.schema.errors import ErrorCode

    response = r1.DescribeAclsResponse(throttle_time=__import__("datetime").timedelta(0), error_code=ErrorCode(code),
                                       error_message=None, resources=resources)
    return codec.encode_response(response, 0)[4:]


class FakeConn:
    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    async def request(self, payload: bytes, timeout_s=None) -> bytes:
        return self.answer

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("code, words", [(54, "has no authorizer"), (31, "DESCRIBE on CLUSTER")])
def test_a_backend_without_acls_fails_start_up_with_one_clear_line(code, words):
    az = BackendAuthorizer(BackendClients("127.0.0.1:1"))
    az._conns = [FakeConn(_answer(code))]
    with pytest.raises(AuthorizerError) as info:
        asyncio.run(az.start())
    assert words in str(info.value) and "\n" not in str(info.value)


def test_describe_acls_answers_become_bindings():
    from kio.schema.describe_acls.v1 import response as r1

    from kio.static.primitive import i8

    resource = r1.DescribeAclsResource(resource_type=i8(3), resource_name="team-", pattern_type=i8(4), acls=(
        r1.AclDescription(principal="User:alice", host="*", operation=i8(3), permission_type=i8(3)),))
    az = BackendAuthorizer(BackendClients("127.0.0.1:1"))
    az._conns = [FakeConn(_answer(0, (resource,)))]

    async def run():
        d = await az.decider("User:alice", "h", "SASL_SSL")
        assert d.allows(Op.READ, Res.GROUP, "team-x") and not d.allows(Op.READ, Res.GROUP, "other")

    asyncio.run(run())


def test_allow_everyone_if_no_acl_found_reads_every_principals_acls_once_per_period():
    """allow.everyone.if.no.acl.found: a third, unfiltered DescribeAcls (principal None) says
    whether anyone has an ACL on a resource; it is shared by all principals like User:*'s."""
    clock = Clock()
    everyone = [read("User:alice"), read("User:bob", "bobs-group")]  # unfiltered: everyone's
    az, calls = make({"User:alice": [read("User:alice")], None: everyone}, clock,
                     allow_everyone_if_no_acl_found=True)

    async def run():
        alice = await az.decider("User:alice", "10.0.0.1", "SASL_SSL")
        carol = await az.decider("User:carol", "10.0.0.1", "SASL_SSL")
        assert alice.allows(Op.READ, Res.GROUP, "g")
        assert alice.allows(Op.READ, Res.GROUP, "nobodys-group") and carol.allows(Op.DELETE, Res.TOPIC, "t")
        assert not alice.allows(Op.READ, Res.GROUP, "bobs-group"), "bob's ACL exists: the rule does not apply"
        assert not carol.allows(Op.READ, Res.GROUP, "g"), "alice's ACL exists: the rule does not apply"
        assert calls.count(None) == 1

    asyncio.run(run())


def test_allow_everyone_is_off_by_default_and_then_reads_nothing_more():
    clock = Clock()
    az, calls = make({"User:alice": [read("User:alice")]}, clock)

    async def run():
        d = await az.decider("User:alice", "10.0.0.1", "SASL_SSL")
        assert not d.allows(Op.READ, Res.GROUP, "nobodys-group")
        assert None not in calls

    asyncio.run(run())


def test_a_refusal_is_confirmed_on_acls_read_after_the_request():
    """A grant made after the cached read: the cached set says no, the confirmed answer is yes."""
    clock = Clock()
    acls: dict[str, list[Acl]] = {}
    az, calls = make(acls, clock)

    async def run():
        d = await az.decider("User:bob", "h", "SASL_SSL")  # cached: nothing
        assert not await d.permits(Op.READ, Res.GROUP, "g")  # the first read is fresh: no re-read
        assert az.rechecks == 0
        acls["User:bob"] = [read("User:bob")]  # granted at the backend
        clock.now = 0.1
        d = await az.decider("User:bob", "h", "SASL_SSL")
        assert not d.allows(Op.READ, Res.GROUP, "g")  # the cache does not know it yet
        assert await d.permits(Op.READ, Res.GROUP, "g")  # confirmed on a fresh read: allowed
        assert az.rechecks == 1 and d.allows(Op.READ, Res.GROUP, "g")
        assert (await az.decider("User:bob", "h", "SASL_SSL")).allows(Op.READ, Res.GROUP, "g")  # cached now

    asyncio.run(run())


def test_refusals_re_read_at_most_once_per_recheck_interval():
    """A client refused again and again: one re-read per interval, shared by the refusals that wait."""
    az, calls = make({}, Clock(), denial_recheck_ms=200)
    az._clock = __import__("time").monotonic  # real time: the rate limit sleeps

    async def run():
        deciders = [await az.decider("User:eve", "h", "SASL_SSL") for _ in range(5)]
        before = len(calls)
        results = await asyncio.gather(*(d.permits(Op.READ, Res.GROUP, "g") for d in deciders))
        assert results == [False] * 5
        assert az.rechecks <= 2  # 5 refusals, at most one re-read each 200 ms
        assert len(calls) - before == 2 * az.rechecks  # the principal's and User:*'s

    asyncio.run(run())


def test_a_failed_confirmation_is_retriable_not_a_refusal():
    clock = Clock()
    az, _ = make({}, clock)

    async def run():
        await az.decider("User:eve", "h", "SASL_SSL")
        clock.now = 0.5
        d = await az.decider("User:eve", "h", "SASL_SSL")  # from the cache

        async def broken(principal):
            raise AuthorizerError("backend gone")

        az._describe = broken  # type: ignore[method-assign]
        with pytest.raises(AclsUnavailable):
            await d.permits(Op.READ, Res.GROUP, "g")

    asyncio.run(run())
