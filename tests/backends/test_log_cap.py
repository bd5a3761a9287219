"""A local job's log is capped (head, marker, rolling tail) and its events are never lost (issue 25, item 5).

Real supervisors and jobs; the cap is set small (LocalBackend(log_max_bytes=...)) so a few MB show it. A job that
must pause blocks on a `release` file the test creates; every wait has a deadline.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtrail.backends import logpump
from jobtrail.backends.local import LocalBackend
from jobtrail.models import ExitRecord, LaunchRequest, Placement
from jobtrail.outcomes import events
from support.jobs import WAIT_FOR_RELEASE
from support.waiting import wait_for

CAP = 256 << 10
# 20,000 numbered lines of 100 bytes (2 MB: eight times the cap), an event every 1,000, then a pause while the
# test reads the running job, then 10 more lines and a last event without its newline.
NUMBERED = WAIT_FOR_RELEASE + textwrap.dedent(
    """\
    import json, sys
    for i in range(20000):
        sys.stdout.write(f"{i:06d} " + "n" * 92 + "\\n")
        if i % 1000 == 999:
            print("JOBTRAIL " + json.dumps({"event": "step", "step": i // 1000 + 1}), flush=True)
    sys.stdout.flush()
    wait_for_release()
    for i in range(20000, 20010):
        sys.stdout.write(f"{i:06d} " + "n" * 92 + "\\n")
    sys.stdout.write("JOBTRAIL " + json.dumps({"event": "termination", "reason": "succeeded"}))
    """
)


@pytest.fixture
def backend() -> LocalBackend:
    return LocalBackend(grace_s=0.5, log_max_bytes=CAP)


@pytest.fixture
def started(backend: LocalBackend, tmp_path: Path) -> Iterator[Placement]:
    placement = backend.launch(LaunchRequest(attempt_id="a", script=NUMBERED, workdir=str(tmp_path / "job")))
    yield placement
    if backend.probe(placement).phase == "running":
        backend.cancel(placement)
        _wait_exit(backend, placement)


def _wait_exit(backend: LocalBackend, placement: Placement) -> ExitRecord:
    probe = wait_for(lambda: (p := backend.probe(placement)).phase != "running" and p, 30, "the job to end")
    assert probe.exit is not None, probe
    return probe.exit


def _everything(backend: LocalBackend, placement: Placement) -> list[str]:
    lines, offset = [], 0
    while (chunk := backend.read_log(placement, offset)).lines:
        lines += chunk.lines
        offset = chunk.offset
    return lines


def test_a_capped_log_keeps_head_marker_and_tail_and_every_event(backend: LocalBackend, started: Placement) -> None:
    workdir = Path(started.workdir)
    wait_for(lambda: (workdir / logpump.EVENTS).read_bytes().count(b"\n") >= 20, 30, "the 20th step")
    # While it runs: the marker stands where the middle went, and a cursor into the tail is taken.
    running = _everything(backend, started)
    assert running[0].startswith("000000 ") and "bytes of output dropped here" in "".join(running)
    last = backend.read_tail(started, 3)
    assert last.lines[-1].startswith("JOBTRAIL ") and last.lines[0].startswith("019")
    cursor = last.offset - sum(len(line) + 1 for line in last.lines)

    (workdir / "release").touch()
    assert _wait_exit(backend, started).exit_code == 0
    # The cursor handed out while the job ran still points at the same line once the log is joined.
    assert backend.read_log(started, cursor).lines[0] == last.lines[0]
    log = (workdir / logpump.LOG).read_bytes()
    assert len(log) <= CAP + 4096, len(log)
    assert not list(workdir.glob(logpump.PART_PREFIX + "*")), "the tail's parts are joined into job.log"
    layout = json.loads((workdir / logpump.LAYOUT).read_text())
    assert layout["final"] and layout["dropped_bytes"] > 1_500_000 and layout["dropped_lines"] > 15_000
    lines = _everything(backend, started)
    markers = [i for i, line in enumerate(lines) if line.startswith("[jobtrail] ")]
    assert len(markers) == 1, "one marker, where the middle was dropped"
    assert f"{layout['dropped_bytes']:,} bytes ({layout['dropped_lines']:,} lines)" in lines[markers[0]]
    head, tail = lines[: markers[0]], lines[markers[0] + 1 :]
    numbers = [int(line[:6]) for line in head + tail if not line.startswith("JOBTRAIL")]
    assert numbers[0] == 0 and numbers[-1] == 20009
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert tail[-1] == 'JOBTRAIL {"event": "termination", "reason": "succeeded"}'
    # The dropped middle had most steps; job.events has every one, and the last event without its newline.
    printed = [json.loads(line.removeprefix("JOBTRAIL ")) for line in backend.read_events(started, 0).lines]
    assert [e.get("step") for e in printed] == [*range(1, 21), None] and printed[-1]["event"] == "termination"
    assert backend.read_tail(started, 2).lines == [numbers_line(20009), tail[-1]]


def numbers_line(i: int) -> str:
    return f"{i:06d} " + "n" * 92


def test_a_cursor_inside_the_dropped_part_reads_the_marker_then_goes_on(
    backend: LocalBackend, started: Placement
) -> None:
    (Path(started.workdir) / "release").touch()
    _wait_exit(backend, started)
    layout = json.loads((Path(started.workdir) / logpump.LAYOUT).read_text())
    inside = (layout["head"] + layout["resume"]) // 2
    chunk = backend.read_log(started, inside)
    assert chunk.lines[0].startswith("[jobtrail] ") and chunk.offset == layout["resume"]
    after = backend.read_log(started, chunk.offset, max_lines=1)
    assert after.lines and after.lines[0][:6].isdigit()


def test_binary_noise_lines_without_newline_and_a_kill_mid_line_lose_no_whole_event(
    backend: LocalBackend, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """\
        import json, os, random, signal, sys
        out = sys.stdout.buffer
        noise = bytes(random.Random(7).randrange(256) for _ in range(1 << 16)).replace(b"JOBTRAIL", b"jobtrail")
        for step in range(1, 51):
            out.write(noise)  # binary, newlines at random, so the event may land mid-line
            out.write(b"progress \\r" * 50)  # a progress bar: no newline
            out.write(("JOBTRAIL " + json.dumps({"event": "step", "step": step}) + "\\n").encode())
            out.write(b'JOBTRAIL {"event": "step", "st\\n')  # a damaged event line: skipped, nothing else
            out.flush()
        out.write(b'noise without end JOBTRAIL {"event": "step", "step": 51')  # killed mid-line
        out.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    placement = backend.launch(LaunchRequest(attempt_id="k", script=script, workdir=str(tmp_path / "k")))
    assert _wait_exit(backend, placement).signal == 9
    lines, offset = [], 0
    while (chunk := backend.read_events(placement, offset)).lines:
        lines, offset = lines + chunk.lines, chunk.offset
    steps = [e["step"] for e in events.digest(lines).events]
    assert steps == list(range(1, 51))
    assert (Path(placement.workdir) / logpump.LOG).stat().st_size <= CAP + 4096
    assert backend.read_tail(placement, 1).lines[-1].endswith('"step": 51')
