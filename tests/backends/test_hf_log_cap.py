"""An HF Jobs attempt's log copy is capped like a local job's, and its events are never lost (issue 25, item 5).

The server copies the job's log stream (hf_logs.py): job.log through the local pump's CappedLog (head, marker,
rolling tail at JOBTRAIL_LOG_MAX_BYTES), every event to job.events. Through the real HfApi client against the
emulator, whose log streams drop twice on the way; and the copy's writer alone, stopped at the worst moments
and reopened as a new server process would.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from jobtrail.backends import hf_logs, logpump
from jobtrail.backends.hf_jobs import COMPLETE, HfJobsBackend
from jobtrail.ledger.store import Ledger
from jobtrail.service.facade import JobService
from jobtrail.util.redaction import Redactor
from support.records import add_queued_run
from support.waiting import wait_until_terminal

TOKEN = "hf_alice_write_token_0123456789"
CAP = 256 << 10
# 20,000 numbered lines of 100 bytes (2 MB: eight times the cap), a step event every 1,000 and a committed
# checkpoint every 5,000, then the termination event.
LOUD = textwrap.dedent(
    """\
    import json, sys, time
    def emit(event, **fields):
        print("JOBTRAIL " + json.dumps({"event": event, "time": time.time(), **fields}), flush=True)
    for i in range(20000):
        sys.stdout.write(f"{i:06d} " + "n" * 92 + "\\n")
        if i % 1000 == 999:
            emit("step", step=i // 1000 + 1, loss=1.0 / (i + 1))
        if i % 5000 == 4999:
            path = f"/runs/jt-loudhf00/output/checkpoint-{i // 1000 + 1}"
            emit("checkpoint", path=path, step=i // 1000 + 1, state="committed", manifest_sha256="ab" * 32)
    emit("termination", reason="succeeded")
    """
)


def test_a_remote_jobs_log_copy_is_capped_and_its_receipt_whole(hub, tmp_path: Path) -> None:
    hub.add_token(TOKEN, "alice")
    hub.inject.drop_logs_after(7000, times=2)  # the copy resumes twice, past its head, into its rolling tail
    ledger = Ledger(tmp_path / "ledger.sqlite")
    backend = HfJobsBackend(token=TOKEN, log_max_bytes=CAP)
    service = JobService(ledger, {"hf-jobs": backend}, tmp_path / "home", sys.executable)
    add_queued_run(ledger, "jt-loudhf00", script=LOUD, backend="hf-jobs", host="alice")
    ended = wait_until_terminal(lambda: service.inspect("jt-loudhf00"), 120, "the loud remote job", interval=0.5)
    assert ended.termination_reason == "succeeded", ended.termination_message

    assert [e["step"] for e in ledger.events("jt-loudhf00/1", "step")] == list(range(1, 21))
    committed = [c.step for c in ledger.checkpoints("jt-loudhf00/1") if c.state == "committed"]
    assert sorted(committed) == [5, 10, 15, 20]
    assert ledger.events("jt-loudhf00/1", "termination")[-1]["reason"] == "succeeded"

    workdir = Path(ledger.attempts("jt-loudhf00")[0].placement.workdir)
    assert (workdir / COMPLETE).exists() and not list(workdir.glob(logpump.PART_PREFIX + "*"))
    assert CAP * 3 // 4 < (workdir / logpump.LOG).stat().st_size <= CAP + 4096
    events = (workdir / logpump.EVENTS).read_text().splitlines()
    assert len(events) == 25 and all(line.startswith("JOBTRAIL {") for line in events)

    # The copy reads as head, marker, tail: each line once and in order, across the dropped streams.
    lines, cursor = [], 0
    while (page := service.logs("jt-loudhf00", tail=5000, cursor=cursor)).lines:
        lines += page.lines
        cursor = page.cursor
    (marker,) = [i for i, line in enumerate(lines) if line.startswith("[jobtrail] ")]
    layout = json.loads((workdir / logpump.LAYOUT).read_text())
    assert f"{layout['dropped_bytes']:,} bytes" in lines[marker] and "JOBTRAIL_LOG_MAX_BYTES=262144" in lines[marker]
    before = [int(line[:6]) for line in lines[:marker] if line[:6].isdigit()]
    after = [int(line[:6]) for line in lines[marker + 1 :] if line[:6].isdigit()]
    assert before == list(range(len(before))) and after == list(range(after[0], 20000)), (before[-3:], after[:3])
    last = service.logs("jt-loudhf00", tail=3)
    assert last.finished and "===== Job finished" in last.lines[-1] and '"termination"' in last.lines[-2]


def _copy(workdir: Path) -> hf_logs.StreamCopy:
    return hf_logs.StreamCopy(workdir, logpump.MIN_MAX_BYTES, Redactor([TOKEN]))


def _stream() -> list[str]:
    """A log of 3,000 lines (300 KB: over the 64 KiB cap), an event every 100, one line holding the token."""
    lines = []
    for i in range(3000):
        lines.append(f"{i:05d} " + "x" * 94)
        if i % 100 == 99:
            lines.append("JOBTRAIL " + json.dumps({"event": "step", "step": i // 100 + 1, "time": float(i)}))
    lines[5] = f"the token {TOKEN} is hidden"
    return lines


def test_a_copy_reopened_after_its_process_stopped_goes_on_exactly(tmp_path: Path) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    for workdir in (whole, resumed):
        workdir.mkdir()
        logpump.prepare(workdir)
    lines = _stream()
    copy = _copy(whole)
    copy.feed(lines)
    copy.close()

    # Four processes copy it in turn. The first stops in the middle of an event's line (its event written: events
    # go first), the second between an event and its line, the third between two lines; the last copies the rest.
    events = [i for i, line in enumerate(lines) if line.startswith("JOBTRAIL ")]
    first = _copy(resumed)
    first.feed(lines[: events[0]])
    logpump.write_all(first.events_fd, (lines[events[0]] + "\n").encode())
    first.log.write(lines[events[0]][:40].encode())
    first.abandon()
    second = _copy(resumed)
    second.feed(lines[: events[20]])
    logpump.write_all(second.events_fd, (lines[events[20]] + "\n").encode())
    second.abandon()
    third = _copy(resumed)
    third.feed(lines[:2500])
    third.abandon()
    last = _copy(resumed)
    last.feed(lines)
    last.close()

    for name in (logpump.LOG, logpump.EVENTS, logpump.LAYOUT):
        assert (resumed / name).read_bytes() == (whole / name).read_bytes(), name
    assert TOKEN.encode() not in (whole / logpump.LOG).read_bytes()
    assert hf_logs.finished(resumed) and not hf_logs.finished(tmp_path)
    steps = [json.loads(line[len("JOBTRAIL ") :])["step"] for line in (whole / logpump.EVENTS).read_text().splitlines()]
    assert steps == list(range(1, 31))
