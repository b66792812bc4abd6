"""The console's actions, each authorized as the Kafka API it stands for would be:

=====================  ==================================  =========================================
action                 Kafka API                           ACLs asked (auth/acls.py rules)
=====================  ==================================  =========================================
reset start offset     AlterShareGroupOffsets              READ on the GROUP, READ on each TOPIC
delete group           DeleteGroups                        DELETE on the GROUP
redrive dead letters   Fetch the DLQ, Produce the target   READ on the GROUP, READ on the DLQ TOPIC,
                                                           WRITE on each target TOPIC
=====================  ==================================  =========================================

Reset and delete go through the admin service (the same code as the Kafka APIs, with its rules:
an empty group only). Redrives run here as tasks (dlq/redrive.py); their progress is on the
backend, so one interrupted by a crash is resumed when the console starts again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..auth.acls import Decider, Op, Res
from ..dlq.redrive import Redrive, RedriveError, RedriveRequest, RedriveStatus, progress, redrive_name
from .security import Refused

log = logging.getLogger("kshare.console")


def require(decider: Decider, op: Op, res: Res, name: str) -> None:
    if not decider.allows(op, res, name):
        raise Refused(403, f"not authorized: {decider.principal} may not {op.name} {res.name} {name!r}")


async def reset_start_offset(admin: Any, backend: Any, decider: Decider, group: str, to: str,
                             offset: int | None = None, topic: str | None = None) -> str:
    """AlterShareGroupOffsets of every share-partition of ``group`` (or of one topic) to the
    earliest or latest offset, or to ``offset``. Returns the line for the page."""
    require(decider, Op.READ, Res.GROUP, group)
    if to not in ("earliest", "latest", "offset"):
        raise Refused(400, f"to = {to!r}: allowed values are earliest, latest, offset")
    if to == "offset" and (offset is None or offset < 0):
        raise Refused(400, "to = offset needs an offset >= 0")
    topics = [t for t in await admin.describe_offsets(group, None) if topic in (None, "", t.name)]
    if not topics:
        raise Refused(404, f"share group {group!r} has no share-partition state" + (f" for topic {topic!r}"
                                                                                     if topic else ""))
    for t in topics:
        require(decider, Op.READ, Res.TOPIC, t.name)
    wanted: dict[str, dict[int, int]] = {}
    for t in topics:
        for po in t.partitions:
            if to == "offset":
                value = offset
            else:
                value = await backend.list_offsets(t.name, po.partition, to)
            assert value is not None
            wanted.setdefault(t.name, {})[po.partition] = value
    result = await admin.alter_offsets(group, wanted)
    failed = [f"{t.name}-{p.partition}: {ErrorCode(p.error).name.upper()} {p.message or ''}".strip()
              for t in result for p in t.partitions if p.error]
    done = sum(1 for t in result for p in t.partitions if not p.error)
    if failed:
        raise Refused(409, f"reset {done} share-partition(s); failed: {'; '.join(failed)}")
    log.info("console: share group %s start offsets reset to %s by %s (%d share-partitions)", group,
             offset if to == "offset" else to, decider.principal, done)
    return f"start offset of {done} share-partition(s) of {group} reset to {offset if to == 'offset' else to}"


async def delete_group(admin: Any, decider: Decider, group: str) -> str:
    require(decider, Op.DELETE, Res.GROUP, group)
    [(_, code)] = await admin.delete_groups([group])
    if code != ErrorCode.none:
        hint = " (it still has members: stop its consumers first)" if code == ErrorCode.non_empty_group else ""
        raise Refused(409, f"share group {group!r} was not deleted: {ErrorCode(code).name.upper()}{hint}")
    log.info("console: share group %s deleted by %s", group, decider.principal)
    return f"share group {group} deleted"


class Redrives:
    """Redrives running in this sidecar, and the last ones that ended."""

    def __init__(self, *, bootstrap_servers: str, client_options: dict[str, Any], max_rate: int,
                 coordinates: Callable[[str], bool]) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_options = client_options
        self.max_rate = max_rate
        self.coordinates = coordinates
        self.running: dict[str, tuple[Redrive, asyncio.Task[RedriveStatus]]] = {}
        self.ended: deque[RedriveStatus] = deque(maxlen=20)

    def start(self, request: RedriveRequest, decider: Decider | None) -> Redrive:
        name = redrive_name(request.group, request.dlq_topic)
        if name in self.running:
            raise Refused(409, f"redrive {name!r} is already running in this sidecar")
        if request.rate > self.max_rate:
            raise Refused(400, f"rate {request.rate:g} records/s is above console.redrive.max.records.per.second "
                               f"({self.max_rate})")

        async def authorize_write(topic: str) -> bool:
            return decider is None or decider.allows(Op.WRITE, Res.TOPIC, topic)

        try:
            redrive = Redrive(request, bootstrap_servers=self.bootstrap_servers, client_options=self.client_options,
                              authorize_write=authorize_write)
        except RedriveError as exc:
            raise Refused(400, str(exc)) from None
        task = asyncio.create_task(redrive.run(), name=f"kshare-redrive-{request.group}")
        self.running[name] = (redrive, task)

        def ended(t: asyncio.Task[RedriveStatus]) -> None:
            self.running.pop(name, None)
            if not t.cancelled() and t.exception() is None:
                self.ended.appendleft(t.result())
            elif not t.cancelled():
                log.error("redrive %s ended with %r", name, t.exception())

        task.add_done_callback(ended)
        return redrive

    def statuses(self) -> list[RedriveStatus]:
        return [r.status for r, _ in self.running.values()] + list(self.ended)

    def stop(self, name: str) -> bool:
        entry = self.running.get(name)
        if entry is None:
            return False
        entry[0].stop()
        return True

    async def resume_unfinished(self, decider_for: Callable[[str], Any]) -> int:
        """Start again every redrive the backend has an unfinished position for, of the groups this
        sidecar coordinates; each as the principal that started it (its WRITE rights are checked)."""
        try:
            found = await progress(self.bootstrap_servers, self.client_options)
        except Exception as exc:  # noqa: BLE001 - a console without resumed redrives still serves
            log.warning("console: unfinished redrives could not be looked up: %s", exc)
            return 0
        resumed = 0
        for p in found:
            if not p["unfinished"] or not p["group"] or not p["dlq_topic"] or not self.coordinates(p["group"]):
                continue
            request = RedriveRequest(p["group"], p["dlq_topic"], p["target"] or "",
                                     float(min(p["rate"] or self.max_rate, self.max_rate)), p["skip_missing"],
                                     p["by"] or "")
            decider = await decider_for(request.principal) if request.principal else None
            try:
                self.start(request, decider)
            except Refused as exc:
                log.warning("console: redrive %s not resumed: %s", p["name"], exc.message)
                continue
            log.info("console: resuming redrive %s (%d dead letters left)", p["name"], p["left"])
            resumed += 1
        return resumed

    async def close(self) -> None:
        for redrive, _task in list(self.running.values()):
            redrive.stop()
        tasks = [t for _r, t in list(self.running.values())]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=10)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
