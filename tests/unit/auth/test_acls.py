"""The ACL evaluator (kshare_sidecar/auth/acls.py): Kafka's StandardAuthorizer rules, checked by
hand for the cases the share APIs rely on and against a naive model with hypothesis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.auth.acls import ALLOW_ALL, Acl, AclSet, Decider, Op, Pattern, Permission, Res

ALICE = "User:alice"


def acl(rtype=Res.GROUP, name="g", pattern=Pattern.LITERAL, principal=ALICE, host="*", op=Op.READ,
        permission=Permission.ALLOW) -> Acl:
    return Acl(int(rtype), name, int(pattern), principal, host, int(op), int(permission))


def allows(acls, op, rtype=Res.GROUP, name="g", principal=ALICE, host="10.0.0.1") -> bool:
    return AclSet(acls).authorize(principal, host, op, rtype, name)


def test_allow_everyone_if_no_acl_found_applies_only_where_nobody_has_an_acl():
    bob_g = acl(name="g", principal="User:bob")
    bob_deny = acl(rtype=Res.TOPIC, name="t", principal="User:bob", op=Op.WRITE, permission=Permission.DENY)
    team = acl(name="team-", pattern=Pattern.PREFIXED, principal="User:bob", host="10.9.9.9")
    every = [bob_g, bob_deny, team]
    on = AclSet([], resource_acls=every)  # alice has no ACL of her own
    assert on.allow_if_no_acl and not AclSet([]).allow_if_no_acl
    assert on.authorize(ALICE, "10.0.0.1", Op.READ, Res.GROUP, "other")  # no ACL of anyone: allowed
    assert on.authorize(ALICE, "10.0.0.1", Op.ALTER_CONFIGS, Res.TOPIC, "t2")
    assert not on.authorize(ALICE, "10.0.0.1", Op.READ, Res.GROUP, "g"), "bob's ACL on g: the rule is off there"
    assert not on.authorize(ALICE, "10.0.0.1", Op.READ, Res.TOPIC, "t"), "any ACL counts, a DENY of WRITE too"
    assert not on.authorize(ALICE, "10.0.0.1", Op.READ, Res.GROUP, "team-x"), "a PREFIXED ACL for another host"
    own = AclSet([acl(name="mine", op=Op.DESCRIBE)], resource_acls=[])  # own ACL read, the full read older
    assert not own.authorize(ALICE, "10.0.0.1", Op.READ, Res.GROUP, "mine")
    assert AclSet([], resource_acls=[acl(name="*")]).authorize(ALICE, "h", Op.READ, Res.TOPIC, "x")
    assert not AclSet([], resource_acls=[acl(name="*")]).authorize(ALICE, "h", Op.READ, Res.GROUP, "x")


def test_nothing_is_allowed_without_an_acl():
    assert not allows([], Op.READ)
    assert not allows([], Op.DESCRIBE)


def test_literal_prefixed_and_wildcard_patterns():
    assert allows([acl(name="g")], Op.READ, name="g")
    assert not allows([acl(name="g")], Op.READ, name="g2")
    assert allows([acl(name="*")], Op.READ, name="anything")
    assert allows([acl(name="team-", pattern=Pattern.PREFIXED)], Op.READ, name="team-a")
    assert not allows([acl(name="team-", pattern=Pattern.PREFIXED)], Op.READ, name="other")
    assert not allows([acl(name="*", pattern=Pattern.PREFIXED)], Op.READ, name="g")  # '*' is literal here
    assert not allows([acl(rtype=Res.TOPIC, name="g")], Op.READ, rtype=Res.GROUP, name="g")


def test_principal_and_host():
    assert allows([acl(principal="User:*")], Op.READ)
    assert not allows([acl(principal="User:bob")], Op.READ)
    assert allows([acl(host="10.0.0.1")], Op.READ, host="10.0.0.1")
    assert not allows([acl(host="10.0.0.2")], Op.READ, host="10.0.0.1")


def test_implications_apply_to_allow_only():
    for implying in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allows([acl(op=implying)], Op.DESCRIBE)
    assert allows([acl(op=Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS)
    assert not allows([acl(op=Op.DESCRIBE)], Op.READ)
    assert not allows([acl(op=Op.DESCRIBE_CONFIGS)], Op.ALTER_CONFIGS)
    assert not allows([acl(op=Op.ALTER_CONFIGS)], Op.DESCRIBE)
    assert allows([acl(op=Op.ALL)], Op.DELETE)
    # DENY READ does not deny DESCRIBE (implied by an ALLOW ALTER here)
    assert allows([acl(op=Op.ALTER), acl(op=Op.READ, permission=Permission.DENY)], Op.DESCRIBE)


def test_deny_wins():
    assert not allows([acl(op=Op.ALL), acl(op=Op.READ, permission=Permission.DENY)], Op.READ)
    assert not allows([acl(op=Op.READ), acl(op=Op.ALL, permission=Permission.DENY, principal="User:*")], Op.READ)
    assert not allows([acl(op=Op.READ), acl(name="g", pattern=Pattern.PREFIXED, permission=Permission.DENY)],
                      Op.READ)
    assert allows([acl(op=Op.READ), acl(permission=Permission.DENY, host="10.9.9.9")], Op.READ)


def test_super_user_and_allow_all():
    assert AclSet(super_user=True).authorize(ALICE, "h", Op.DELETE, Res.GROUP, "g")
    assert ALLOW_ALL.allows(Op.ALTER_CONFIGS, Res.GROUP, "x") and ALLOW_ALL.unrestricted
    d = Decider(AclSet([acl(name="a"), acl(name="b", op=Op.DESCRIBE)]), ALICE, "h")
    assert d.allowed(Op.READ, Res.GROUP, ["a", "b", "c", "a"]) == {"a"}


# -- the naive model: Kafka's rules written out as sets, compared on random ACL sets -------------
OPS = [Op.ALL, Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
       Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE]
GRANTS = {  # what an ALLOW of each operation lets one do
    Op.ALL: set(OPS), Op.READ: {Op.READ, Op.DESCRIBE}, Op.WRITE: {Op.WRITE, Op.DESCRIBE},
    Op.DELETE: {Op.DELETE, Op.DESCRIBE}, Op.ALTER: {Op.ALTER, Op.DESCRIBE}, Op.ALTER_CONFIGS:
    {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}}


def naive(acls, principal, host, op, rtype, name) -> bool:
    def matches(a):
        pattern_ok = (a.pattern == Pattern.LITERAL and a.name in (name, "*")) or \
            (a.pattern == Pattern.PREFIXED and name[:len(a.name)] == a.name)
        return a.resource_type == rtype and pattern_ok and a.principal in (principal, "User:*") and \
            a.host in ("*", host)

    relevant = [a for a in acls if matches(a)]
    denied = any(a.permission == Permission.DENY and (a.operation == op or a.operation == Op.ALL) for a in relevant)
    granted = set().union(*(GRANTS.get(Op(a.operation), {Op(a.operation)}) for a in relevant
                            if a.permission == Permission.ALLOW))
    return not denied and op in granted


names = st.sampled_from(["g", "g1", "gx", "t", "team-a", "team-", "*", ""])
acls_strategy = st.lists(st.builds(
    Acl, st.sampled_from([int(Res.GROUP), int(Res.TOPIC), int(Res.CLUSTER)]), names,
    st.sampled_from([int(Pattern.LITERAL), int(Pattern.PREFIXED)]),
    st.sampled_from([ALICE, "User:*", "User:bob"]), st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
    st.sampled_from([int(o) for o in OPS]), st.sampled_from([int(Permission.ALLOW), int(Permission.DENY)])),
    max_size=8)


@settings(max_examples=400, deadline=None)
@given(acls_strategy, st.sampled_from([ALICE, "User:bob", "User:carol"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]),
       st.sampled_from(OPS[1:]), st.sampled_from([Res.GROUP, Res.TOPIC, Res.CLUSTER]),
       st.sampled_from(["g", "g1", "team-a", "t", "kafka-cluster"]))
def test_evaluator_agrees_with_the_naive_model(acls, principal, host, op, rtype, name):
    assert AclSet(acls).authorize(principal, host, op, rtype, name) == naive(acls, principal, host, op, rtype, name)


def naive_everyone(acls, principal, host, op, rtype, name) -> bool:
    """StandardAuthorizer with allow.everyone.if.no.acl.found=true: the naive rule, or — when no
    ACL of any principal, host, operation or permission matches the resource — allowed."""
    def on_resource(a):
        return a.resource_type == rtype and ((a.pattern == Pattern.LITERAL and a.name in (name, "*")) or
                                             (a.pattern == Pattern.PREFIXED and name[:len(a.name)] == a.name))
    return naive(acls, principal, host, op, rtype, name) or not any(on_resource(a) for a in acls)


@settings(max_examples=400, deadline=None)
@given(acls_strategy, st.sampled_from([ALICE, "User:bob", "User:carol"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]),
       st.sampled_from(OPS[1:]), st.sampled_from([Res.GROUP, Res.TOPIC, Res.CLUSTER]),
       st.sampled_from(["g", "g1", "team-a", "t", "kafka-cluster"]))
def test_allow_everyone_agrees_with_the_naive_model(acls, principal, host, op, rtype, name):
    own = [a for a in acls if a.principal in (principal, "User:*")]  # what the authorizer reads per principal
    evaluated = AclSet(own, resource_acls=acls).authorize(principal, host, op, rtype, name)
    assert evaluated == naive_everyone(acls, principal, host, op, rtype, name)
