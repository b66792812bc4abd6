"""Top frames of a py-spy speedscope profile, by self time and by inclusive time.

``benchmarks/throughput.py --pyspy`` records the sidecar of scenario (a) with py-spy (native frames,
idle time excluded: samples are time on a CPU). This prints the frames where that time is spent
(self: the frame was the innermost one; inclusive: it was anywhere on the stack), the share per
source file, and the CPU seconds per million records when ``--records`` is given.

Usage: python benchmarks/pyspy_top.py PROFILE.json [--top 25] [--records N] [--rate 200]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

#: innermost frames that mean "waiting, not computing": py-spy's own idle detection misses native
#: waits (the event loop's epoll, the metrics server thread's poll), so they are split off here
IDLE = ("epoll_wait", "poll", "select", "__select", "pthread_cond_wait", "pthread_cond_timedwait", "futex",
        "sem_wait", "sem_timedwait", "nanosleep", "clock_nanosleep", "accept", "accept4", "__futex_abstimed_wait")


def load(path: Path, rate: int) -> tuple[list[dict], list[tuple[list[int], float]]]:
    """Frames and ``(stack, seconds)`` samples of every thread (py-spy weighs samples in seconds)."""
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    samples: list[tuple[list[int], float]] = []
    for profile in data["profiles"]:
        scale = 1.0 if profile.get("unit") == "seconds" else 1.0 / rate
        weights = profile.get("weights") or [1] * len(profile["samples"])
        samples += [(stack, w * scale) for stack, w in zip(profile["samples"], weights)]
    return frames, samples


def label(frame: dict) -> str:
    file = frame.get("file") or ""
    for cut in ("site-packages/", "kshare_sidecar/", "lib/python3"):
        if cut in file:
            file = file[file.index(cut) + (0 if cut == "kshare_sidecar/" else len(cut)):]
            break
    line = frame.get("line")
    return f"{frame['name']} ({file}{':' + str(line) if line else ''})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--records", type=int, help="records delivered while recording: adds CPU-s per 1M")
    ap.add_argument("--rate", type=int, default=200, help="py-spy's sampling rate (samples/s)")
    args = ap.parse_args()
    frames, all_samples = load(args.profile, args.rate)
    idle = {i for i, f in enumerate(frames) if f["name"] in IDLE}
    samples = [(s, w) for s, w in all_samples if s and s[-1] not in idle]
    waited = sum(w for s, w in all_samples) - sum(w for _, w in samples)
    total = sum(w for _, w in samples)
    self_w: collections.Counter[int] = collections.Counter()
    incl_w: collections.Counter[int] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    for stack, w in samples:
        if not stack:
            continue
        self_w[stack[-1]] += w
        by_file[(frames[stack[-1]].get("file") or "?").rsplit("/", 1)[-1]] += w
        for i in set(stack):
            incl_w[i] += w
    per_1m = f", {total / args.records * 1e6:.2f} s per 1M records" if args.records else ""
    print(f"{len(samples)} samples on a CPU: {total:.2f} s{per_1m} (and {waited:.2f} s waiting, left out)")
    print("\nself time")
    for i, w in self_w.most_common(args.top):
        print(f"  {100 * w / total:5.1f}%  {w:6.2f} s  {label(frames[i])}")
    print("\ninclusive time")
    for i, w in incl_w.most_common(args.top):
        print(f"  {100 * w / total:5.1f}%  {w:6.2f} s  {label(frames[i])}")
    print("\nself time by file")
    for f, w in by_file.most_common(args.top):
        print(f"  {100 * w / total:5.1f}%  {w:6.2f} s  {f}")


if __name__ == "__main__":
    main()
