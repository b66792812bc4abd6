"""A deliberately naive per-offset reference model of a share-partition, for property tests.

Every offset of the window is its own [state, count, member, deadline] entry and every rule is
written offset by offset, straight from the spec in docs/engine.md, so it shares no code with the
range-based engine.
"""

from __future__ import annotations

from kshare_sidecar.persist.model import DeliveryState, PartitionState, StateBatch
from kshare_sidecar.share.engine import ShareConfig

AV, AQ, AK, AR = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
NONE, INVALID_REQUEST, INVALID_RECORD_STATE = 0, 42, 121


class ModelPartition:
    def __init__(self, cfg: ShareConfig, spso: int = 0) -> None:
        self.cfg = cfg
        self.spso = spso
        self.end = spso
        self.log_start = 0
        self.recs: dict[int, list] = {}  # offset -> [state, count, member, deadline]
        self.state_epoch = 0
        self.leader_epoch = 0

    # -------------------------------------------------------------- helpers
    def _advance(self) -> None:
        while self.spso < self.end and self.recs[self.spso][0] in (AK, AR):
            del self.recs[self.spso]
            self.spso += 1

    def _released_state(self, off: int, count: int) -> int:
        return AR if count >= self.cfg.delivery_count_limit or off < self.log_start else AV

    def _release(self, off: int) -> None:
        rec = self.recs[off]
        rec[0] = self._released_state(off, rec[1])
        rec[2] = rec[3] = None

    def next_fetch_offset(self):
        for o in range(self.spso, self.end):
            if self.recs[o][0] == AV:
                return o
        if self.end - self.spso < self.cfg.max_record_locks:
            return self.end
        return None

    def terminal_count(self) -> int:
        return sum(1 for r in self.recs.values() if r[0] in (AK, AR))

    def per_offset(self) -> dict[int, tuple]:
        return {o: tuple(r) for o, r in self.recs.items()}

    def next_lock_deadline(self):
        ds = [r[3] for r in self.recs.values() if r[0] == AQ]
        return min(ds) if ds else None

    # -------------------------------------------------------------- acquire
    def acquire(self, member, batches, max_records, batch_size, mode, aborted, now, fetch_offset=None):
        cfg = self.cfg
        limit = cfg.delivery_count_limit
        t_at = max(2, -(-limit // 2))
        if max_records <= 0:
            return []
        if not batch_size or batch_size <= 0:
            batch_size = max_records
        floor = max(self.spso, self.log_start)
        cap_last = max(self.end - 1, self.spso + cfg.max_record_locks - 1)
        # Kafka acquires the log batch that crosses the cap whole while the window has room
        whole = mode != 1 and self.end - self.spso < cfg.max_record_locks
        covered = None if fetch_offset is None else min(fetch_offset, self.end) - 1

        def avail(o):
            return o >= self.end or self.recs[o][0] == AV

        def count(o):
            return 0 if o >= self.end else self.recs[o][1]

        aborted = sorted(aborted or [], key=lambda a: a[1])
        ai = 0
        active = set()
        chosen = []  # (offset, new_count, batch_index)
        archive = []
        got = 0
        want = max_records
        strict = mode == 1
        throttled = False
        stop = False
        for bi, (base, last, pid, txn, ctrl) in enumerate(batches):
            while ai < len(aborted) and aborted[ai][1] <= last:
                active.add(aborted[ai][0])
                ai += 1
            drop = ctrl or (txn and pid in active)
            if ctrl:
                active.discard(pid)
            if base > cap_last:
                break
            hole_start = self.end if covered is None else covered + 1
            for o in range(max(hole_start, floor), base):
                if avail(o):
                    archive.append(o)
            if covered is not None and last <= covered:
                continue
            lo = max(base, floor, -1 if covered is None else covered + 1)
            covered = last
            hi = last if whole and not strict else min(last, cap_last)
            offs = [o for o in range(lo, hi + 1) if avail(o)]
            if drop:
                archive.extend(offs)
                continue
            for o in offs:
                c = count(o)
                if c >= limit:
                    archive.append(o)
                    continue
                if cfg.throttle_redelivery and c >= t_at:
                    chunk = 1 if c + 1 >= limit else max(1, max_records >> (c - t_at + 1))
                    if not throttled:
                        if got:
                            stop = True
                            break
                        throttled = strict = True
                    want = min(want, chunk)
                    if got >= want:
                        stop = True
                        break
                elif throttled:
                    stop = True
                    break
                chosen.append((o, c + 1, bi))
                got += 1
                if strict and got >= want:
                    stop = True
                    break
            if stop or got >= want:
                break
        # pieces
        pieces = []
        prev = None
        for o, c, bi in chosen:
            if (
                prev is not None
                and prev[0] + 1 == o
                and prev[1] == c
                and (mode == 1 or prev[2] == bi or pieces[-1][1] - pieces[-1][0] + 1 < batch_size)
            ):
                pieces[-1][1] = o
            else:
                pieces.append([o, o, c])
            prev = (o, c, bi)
        deadline = now + cfg.record_lock_duration_ms
        for o in archive:
            self.recs[o] = [AR, count(o), None, None]
            self.end = max(self.end, o + 1)
        for o, c, _ in chosen:
            self.recs[o] = [AQ, c, member, deadline]
            self.end = max(self.end, o + 1)
        assert all(o in self.recs for o in range(self.spso, self.end)), "model window has holes"
        self._advance()
        return [tuple(p) for p in pieces]

    # -------------------------------------------------------------- acks
    def validate(self, member, batches, allow_renew=True):
        max_t = 4 if allow_renew else 3
        ops = []
        prev_last = -1
        for first, last, types in batches:
            if first < 0 or last < first or first <= prev_last or not types:
                return INVALID_REQUEST, []
            if len(types) not in (1, last - first + 1):
                return INVALID_REQUEST, []
            for t in types:
                if not 0 <= t <= max_t:
                    return INVALID_REQUEST, []
            for i, o in enumerate(range(first, last + 1)):
                ops.append((o, types[0] if len(types) == 1 else types[i]))
            prev_last = last
        for first, last, _types in batches:  # bounds first, as Kafka checks a batch against its cache
            if first < self.spso or self.spso == self.end:
                return INVALID_RECORD_STATE, []
            if last >= self.end:
                return INVALID_REQUEST, []
        for o, t in ops:
            st, c, m, _ = self.recs[o]
            if st == AQ:
                if m != member:
                    return INVALID_RECORD_STATE, []
            elif not (t == GAP and st == AR and c == 0):
                return INVALID_RECORD_STATE, []
        return NONE, ops

    def apply(self, ops, now):
        for o, t in ops:
            rec = self.recs[o]
            if rec[0] != AQ:
                continue
            if t == RENEW:
                rec[3] = now + self.cfg.record_lock_duration_ms
            elif t == ACCEPT:
                rec[0] = AK
                rec[2] = rec[3] = None
            elif t == RELEASE:
                self._release(o)
            else:
                rec[0] = AR
                rec[2] = rec[3] = None
        self._advance()

    def acknowledge(self, member, batches, now, allow_renew=True):
        code, ops = self.validate(member, batches, allow_renew)
        if code == NONE:
            self.apply(ops, now)
        return code

    # -------------------------------------------------------------- others
    def expire(self, now) -> int:
        n = 0
        for o, rec in self.recs.items():
            if rec[0] == AQ and rec[3] <= now:
                self._release(o)
                n += 1
        self._advance()
        return n

    def release_member(self, member) -> int:
        n = 0
        for o, rec in self.recs.items():
            if rec[0] == AQ and rec[2] == member:
                self._release(o)
                n += 1
        self._advance()
        return n

    def move_log_start(self, offset) -> None:
        if offset <= self.log_start:
            return
        self.log_start = offset
        if offset <= self.spso:
            return
        for o in range(self.end, offset):
            self.recs[o] = [AR, 0, None, None]
        self.end = max(self.end, offset)
        for o in range(self.spso, offset):
            if self.recs[o][0] == AV:
                self.recs[o][0] = AR
        self._advance()

    def reset(self, start, state_epoch) -> None:
        start = max(start, self.log_start)
        self.recs.clear()
        self.spso = self.end = start
        self.state_epoch = state_epoch

    def snapshot(self) -> PartitionState:
        out = []
        for o in range(self.spso, self.end):
            st, c = self.recs[o][0], self.recs[o][1]
            if st == AQ:
                st, c = AV, c - 1
            if st == AV and c == 0:
                continue
            if out and out[-1][1] + 1 == o and out[-1][2] == st and out[-1][3] == c:
                out[-1][1] = o
            else:
                out.append([o, o, st, c])
        return PartitionState(
            self.state_epoch,
            self.leader_epoch,
            self.spso,
            tuple(StateBatch(f, l, DeliveryState(s), c) for f, l, s, c in out),
        )

    def restore(self, state: PartitionState) -> None:
        self.spso = state.start_offset
        self.state_epoch = state.state_epoch
        self.leader_epoch = state.leader_epoch
        self.log_start = 0
        self.recs = {}
        end = self.spso
        for b in state.state_batches:
            for o in range(max(b.first_offset, self.spso), b.last_offset + 1):
                self.recs[o] = [int(b.delivery_state), b.delivery_count, None, None]
            end = max(end, b.last_offset + 1)
        for o in range(self.spso, end):
            self.recs.setdefault(o, [AV, 0, None, None])
        self.end = end
        self._advance()
