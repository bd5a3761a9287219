"""A full disk under a local job's workdir: the pump goes on reading (the job never blocks or dies of a closed pipe),
the supervisor still records the ending, and the job's events are kept and written once space is back.

The kernel's own ENOSPC without root or a small filesystem: job.log and job.events are symlinks to /dev/full, whose
every write fails with ENOSPC."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from jobtrail.backends import logpump, supervisor
from support.waiting import wait_for

# 3 MB of output (three times the pipe) with an event every 1,000 lines, a traceback, its termination event, exit 3.
CHATTY_JOB = """
import json, sys
for i in range(30000):
    sys.stdout.write(f"{i:06d} " + "n" * 92 + "\\n")
    if i % 1000 == 999:
        print("JOBTRAIL " + json.dumps({"event": "step", "step": i // 1000 + 1}))
print("OSError: [Errno 28] No space left on device")
print("JOBTRAIL " + json.dumps({"event": "termination", "reason": "disk_full", "path": "/out/checkpoint-30"}))
sys.exit(3)
"""


def _full_channels(workdir: Path) -> None:
    workdir.mkdir()
    for name in (logpump.LOG, logpump.EVENTS):
        (workdir / name).symlink_to("/dev/full")


def test_the_supervisor_of_a_job_whose_log_disk_is_full_records_its_real_ending(tmp_path: Path) -> None:
    workdir = tmp_path / "attempt"
    _full_channels(workdir)
    (workdir / supervisor.SCRIPT).write_text(CHATTY_JOB)
    done = subprocess.run(
        [sys.executable, "-I", supervisor.__file__, "--workdir", str(workdir), "--python", sys.executable],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    ending = json.loads((workdir / supervisor.EXIT).read_text())
    # Exit 3, the job's own: not killed by SIGPIPE (13) when a pump that died closed its pipe.
    assert (ending["exit_code"], ending["signal"]) == (3, None), ending
    assert not (workdir / logpump.RESERVE).exists()  # given back at the end


def test_what_a_full_disk_kept_from_the_files_is_written_once_the_reserve_is_given_back(tmp_path: Path) -> None:
    workdir = tmp_path / "attempt"
    _full_channels(workdir)
    read_fd, write_fd = os.pipe()
    pump = threading.Thread(target=logpump.pump, args=(read_fd, workdir, 256 << 10), daemon=True)
    pump.start()
    wait_for(lambda: (workdir / logpump.RESERVE).exists(), 10, "the pump to set its reserve aside")
    assert (workdir / logpump.RESERVE).stat().st_blocks * 512 >= logpump.RESERVE_BYTES  # real blocks
    lines = [f"{i:06d} {'n' * 92}\n".encode() for i in range(30000)]
    for i in range(999, 30000, 1000):
        lines[i] += b'JOBTRAIL {"event":"step","step":%d}\n' % (i // 1000 + 1)
    writer = threading.Thread(target=logpump.write_all, args=(write_fd, b"".join(lines)), daemon=True)
    writer.start()
    writer.join(60)
    assert not writer.is_alive(), "the job blocked on its pipe: the pump stopped reading"
    # The space is back on the pump's two descriptors (what giving back the reserve does on a real disk): real files
    # take the place of /dev/full under them.
    log, events = workdir / "log.real", workdir / "events.real"
    full = sorted(int(n) for n in os.listdir("/proc/self/fd") if _points_to_full(n))
    assert len(full) == 2  # job.log's, then job.events' (opened in that order)
    for target, under in zip((log, events), full, strict=True):
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, under)
        os.close(fd)
    logpump.write_all(write_fd, b'Traceback\nJOBTRAIL {"event":"termination","reason":"disk_full"}')  # no newline
    os.close(write_fd)
    pump.join(30)
    assert not pump.is_alive()
    kept = [json.loads(line[len("JOBTRAIL ") :]) for line in events.read_text().splitlines() if line]
    assert [e.get("step") for e in kept[:-1]] == list(range(1, 31)) and kept[-1]["reason"] == "disk_full"
    text = log.read_text()
    assert "[jobtrail] No space left on device (errno 28) from " in text
    assert text.endswith('Traceback\nJOBTRAIL {"event":"termination","reason":"disk_full"}')
    assert len(text) < (logpump.KEPT_TAIL_BYTES + 1000)  # the note and the kept tail, not 3 MB
    assert not (workdir / logpump.RESERVE).exists()


def _points_to_full(fd: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "/dev/full"
    except OSError:
        return False
