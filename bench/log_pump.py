"""Throughput of the local supervisor's log pump (backends/logpump.py) and the cost of reading a capped log.

A writer thread pushes MB of job output (binary noise with newlines, an event every 3 MB) through a pipe; the pump
copies it into a capped job.log and job.events, as the supervisor does. The baseline copies the same pipe straight
into a file (what a job whose stdout is a file costs). Then the log's last lines and a cursor's read are timed.

Usage: python bench/log_pump.py [--mb 300] [--cap-mb 64] [--secret]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from jobtrail.backends import joblog, logpump
from jobtrail.util.redaction import Redactor

BLOCK = bytes(random.Random(1).randrange(256) for _ in range(1 << 20)).replace(b"JOBTRAIL", b"jobtrail")


def _feed(fd: int, mb: int) -> None:
    with os.fdopen(fd, "wb", buffering=0) as out:
        for i in range(mb):
            out.write(BLOCK)
            if i % 3 == 2:
                out.write(b'JOBTRAIL {"event":"step","step":%d}\n' % i)


def _timed(mb: int, sink: object) -> float:
    read_fd, write_fd = os.pipe()
    logpump.widen_pipe(write_fd)
    writer = threading.Thread(target=_feed, args=(write_fd, mb))
    started = time.perf_counter()
    writer.start()
    sink(read_fd)  # type: ignore[operator]
    writer.join()
    return time.perf_counter() - started


def _copy(read_fd: int, path: Path) -> None:
    with open(path, "wb") as f:
        while chunk := os.read(read_fd, logpump.READ_SIZE):
            f.write(chunk)
    os.close(read_fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--cap-mb", type=int, default=64)
    parser.add_argument("--secret", action="store_true", help="redact a secret too (a local job with HF_TOKEN)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base, pumped = Path(tmp) / "base", Path(tmp) / "pumped"
        base.mkdir()
        pumped.mkdir()
        plain = _timed(args.mb, lambda fd: _copy(fd, base / "job.log"))
        redact = Redactor(["hf_" + "x" * 34]) if args.secret else None
        logpump.prepare(pumped)
        pump = _timed(args.mb, lambda fd: logpump.pump(fd, pumped, args.cap_mb << 20, redact))
        size = (pumped / logpump.LOG).stat().st_size
        events = (pumped / logpump.EVENTS).read_bytes().count(b"\n")
        print(f"{args.mb} MB: straight to a file {args.mb / plain:.0f} MB/s; pumped {args.mb / pump:.0f} MB/s")
        print(f"job.log {size / 2**20:.1f} MiB (cap {args.cap_mb} MiB), job.events {events} lines")
        started = time.perf_counter()
        last = joblog.tail(pumped, 50, finished=True)
        tail_s = time.perf_counter() - started
        started = time.perf_counter()
        joblog.read(pumped, last.offset // 2, 50, finished=True)
        read_s = time.perf_counter() - started
        print(f"last 50 lines {tail_s * 1000:.1f} ms; 50 lines at a cursor {read_s * 1000:.1f} ms")


if __name__ == "__main__":
    main()
