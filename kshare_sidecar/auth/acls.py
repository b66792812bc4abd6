"""Kafka's ACL semantics, sans-I/O: is principal P on host H allowed operation O on resource R?

The sidecar does not keep ACLs of its own: it evaluates *the backend's* ACLs (fetched with
DescribeAcls by :mod:`.authorizer`) with the rules of Kafka's ``StandardAuthorizer``, so a share
group behind kshare is guarded exactly as a native one would be by the same ACLs:

- an ACL applies when its principal is P or ``User:*``, its host is ``*`` or H, and its resource
  pattern matches R: LITERAL with R's name or the wildcard ``*``, or PREFIXED with a prefix of
  R's name (same resource type);
- an operation is allowed when an applicable ALLOW ACL names it or ``ALL`` — or an operation that
  implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
  DESCRIBE_CONFIGS (Kafka's implication applies to ALLOW only);
- any applicable DENY ACL naming the operation or ``ALL`` wins over every ALLOW;
- super users are allowed everything; nothing else is allowed — unless
  ``allow.everyone.if.no.acl.found`` is on and *no ACL at all* (any principal, host, operation or
  permission) matches the resource: then everyone is allowed, as StandardAuthorizer's
  ``noAclRule`` does. Knowing that needs every principal's ACLs (``resource_acls``), not only the
  requesting principal's.

Codes are Kafka's wire values (``AclOperation``, ``ResourceType``, ``PatternType``,
``AclPermissionType`` in Kafka's clients) so DescribeAcls answers map straight in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum


class Op(IntEnum):
    """Kafka's ``AclOperation`` codes."""

    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Res(IntEnum):
    """Kafka's ``ResourceType`` codes."""

    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Pattern(IntEnum):
    """Kafka's ``PatternType`` codes (ANY and MATCH are filter-only)."""

    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(IntEnum):
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD_PRINCIPAL = "User:*"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"

#: ALLOW on any of these also allows the key (Kafka's ``AclEntry.supportedOperations`` implication).
IMPLIED_BY: dict[Op, frozenset[Op]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}


#: Kafka's ``AclEntry.supportedOperations``: what an AuthorizedOperations bit field reports on.
SUPPORTED_OPERATIONS: dict[Res, tuple[Op, ...]] = {
    Res.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    Res.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    Res.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER,
                  Op.DESCRIBE),
    Res.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    Res.DELEGATION_TOKEN: (Op.DESCRIBE,),
    Res.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}
#: An AuthorizedOperations field's "not provided" (the schema's default, Integer.MIN_VALUE).
NOT_PROVIDED = -(2**31)


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL binding as DescribeAcls returns it."""

    resource_type: int
    name: str
    pattern: int
    principal: str
    host: str
    operation: int
    permission: int

    def matches_resource(self, resource_type: int, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern == Pattern.LITERAL:
            return self.name == name or self.name == WILDCARD_RESOURCE
        if self.pattern == Pattern.PREFIXED:
            return name.startswith(self.name)
        return False  # UNKNOWN patterns never match (Kafka skips them too)

    def applies_to(self, principal: str, host: str) -> bool:
        return self.principal in (principal, WILDCARD_PRINCIPAL) and self.host in (WILDCARD_HOST, host)


def _allows(acl_op: int, op: Op) -> bool:
    return acl_op == Op.ALL or acl_op == op or acl_op in IMPLIED_BY.get(op, ())


def _denies(acl_op: int, op: Op) -> bool:
    return acl_op == Op.ALL or acl_op == op


class AclSet:
    """The ACLs that may apply to one principal, indexed by resource type, and the decision rule.

    Immutable once built: the authorizer swaps whole sets on refresh, so a request evaluates
    against one consistent snapshot.
    """

    __slots__ = ("_by_type", "_resources", "super_user")

    def __init__(self, acls: Iterable[Acl] = (), *, super_user: bool = False,
                 resource_acls: Iterable[Acl] | None = None) -> None:
        self._by_type = _by_type(acls)
        self.super_user = super_user
        #: allow.everyone.if.no.acl.found: every ACL of the cluster (any principal); None = off
        self._resources = None if resource_acls is None else _by_type(resource_acls)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_type.values())

    @property
    def allow_if_no_acl(self) -> bool:
        return self._resources is not None

    def authorize(self, principal: str, host: str, op: Op, resource_type: Res, name: str) -> bool:
        """Kafka's decision for one (principal, host, operation, resource)."""
        if self.super_user:
            return True
        allowed = False
        for acl in self._by_type.get(resource_type, ()):
            if not acl.applies_to(principal, host) or not acl.matches_resource(resource_type, name):
                continue
            if acl.permission == Permission.DENY and _denies(acl.operation, op):
                return False
            if acl.permission == Permission.ALLOW and _allows(acl.operation, op):
                allowed = True
        if allowed or self._resources is None:
            return allowed
        # allow.everyone.if.no.acl.found: allowed when no ACL of anyone matches the resource
        # (the principal's own are checked too, in case the two reads were not simultaneous)
        return not any(acl.matches_resource(resource_type, name)
                       for acls in (self._by_type, self._resources) for acl in acls.get(resource_type, ()))


def _by_type(acls: Iterable[Acl]) -> dict[int, tuple[Acl, ...]]:
    by_type: dict[int, list[Acl]] = {}
    for acl in acls:
        by_type.setdefault(acl.resource_type, []).append(acl)
    return {k: tuple(v) for k, v in by_type.items()}


ALLOW_EVERYTHING = AclSet(super_user=True)


#: ``recheck(principal, since)``: the principal's ACLs read from the backend by a read that
#: started at or after ``since`` (:meth:`~.authorizer.BackendAuthorizer.fresh_acls`).
Recheck = Callable[[str, float], Awaitable[AclSet]]


class Decider:
    """An :class:`AclSet` bound to one request's principal and client host: what handlers ask.

    ``allows`` / ``allowed`` / ``operations`` answer from the set the request started with (a
    cached read of the backend's ACLs). Where a *no* becomes an error for the client, handlers ask
    :meth:`permits` (or :meth:`confirm` first): a no on the cached set is checked again on a set
    read after the request arrived, so a refusal never rests on a cache older than a grant — a
    broker applies a new ACL within milliseconds, and GROUP_AUTHORIZATION_FAILED is fatal to share
    consumers. Filtering (a listing without the topics one may not see) keeps the cached answer.
    """

    __slots__ = ("_recheck", "acls", "fresh", "host", "principal", "since")

    def __init__(self, acls: AclSet, principal: str, host: str, *, recheck: Recheck | None = None,
                 since: float = 0.0) -> None:
        self.acls = acls
        self.principal = principal
        self.host = host
        self._recheck = recheck
        self.since = since  # when the request's decisions started (the authorizer's clock)
        self.fresh = recheck is None  # the set was read after `since` (nothing to re-check)

    def __repr__(self) -> str:
        return f"Decider({self.principal}@{self.host}, {len(self.acls)} ACLs{', fresh' if self.fresh else ''})"

    def allows(self, op: Op, resource_type: Res, name: str) -> bool:
        return self.acls.authorize(self.principal, self.host, op, resource_type, name)

    def allowed(self, op: Op, resource_type: Res, names: Iterable[str]) -> set[str]:
        """The subset of ``names`` allowed (Kafka's ``filterByAuthorized``)."""
        return {n for n in set(names) if self.allows(op, resource_type, n)}

    async def confirm(self, *checks: tuple[Op, Res, str]) -> None:
        """Before refusing any of ``checks``: when one of them fails on the cached set, read the
        principal's ACLs again (once per request; the authorizer rate-limits per principal) and
        use that set for the rest of the request."""
        if self.fresh or all(self.allows(op, rt, name) for op, rt, name in checks):
            return
        assert self._recheck is not None
        self.acls = await self._recheck(self.principal, self.since)
        self.fresh = True

    async def permits(self, op: Op, resource_type: Res, name: str) -> bool:
        """``allows``, with a refusal confirmed on a fresh read (:meth:`confirm`)."""
        if self.allows(op, resource_type, name):
            return True
        await self.confirm((op, resource_type, name))
        return self.allows(op, resource_type, name)

    async def permitted(self, op: Op, resource_type: Res, names: Iterable[str]) -> set[str]:
        """``allowed``, with the refused names confirmed on a fresh read (:meth:`confirm`)."""
        wanted = set(names)
        await self.confirm(*((op, resource_type, n) for n in wanted))
        return self.allowed(op, resource_type, wanted)

    def operations(self, resource_type: Res, name: str) -> int:
        """Kafka's AuthorizedOperations for the resource: a bit (1 << code) per allowed operation
        of those the resource type supports (AuthHelper.authorizedOperations) — all of them when
        authorization is off, as a broker without an authorizer answers."""
        return sum(1 << int(op) for op in SUPPORTED_OPERATIONS[resource_type] if self.allows(op, resource_type, name))

    @property
    def unrestricted(self) -> bool:
        return self.acls.super_user


#: Handlers use this when authorization is off: every check passes.
ALLOW_ALL = Decider(ALLOW_EVERYTHING, "User:ANONYMOUS", "")
