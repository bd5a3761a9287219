"""The receipt survives the job's output (issue 25, item 5): a local job that prints 300 MB of noise (binary bytes,
lines without newline) between its events ends with every step, checkpoint and its termination in its receipt,
its job.log capped at the default 64 MiB with the marker, and `logs` reading its end. Real supervisor, real ledger.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from jobtrail.backends import logpump
from jobtrail.backends.local import LocalBackend
from jobtrail.ledger.store import Ledger
from jobtrail.service.facade import JobService
from support.records import add_queued_run
from support.waiting import wait_until_terminal

# 100 steps, 3 MB of noise each (a binary block with random newlines, a progress bar that never ends its line),
# a checkpoint written and committed every 10 steps, and the runtime's termination event.
LOUD = textwrap.dedent(
    """\
    import json, random, sys, time
    out = sys.stdout.buffer
    block = bytes(random.Random(5).randrange(256) for _ in range(1 << 20)).replace(b"JOBTRAIL", b"jobtrail")
    def emit(event, **fields):
        out.write(("JOBTRAIL " + json.dumps({"event": event, "time": time.time(), **fields}) + "\\n").encode())
    for step in range(1, 101):
        out.write(block + block + block[: (1 << 20) - 4000] + b"progress 42%\\r" * 300)
        emit("step", step=step, loss=1.0 / step)
        if step % 10 == 0:
            path = f"/runs/jt-loud0000/output/checkpoint-{step}"
            emit("checkpoint", path=path, step=step, state="writing")
            emit("checkpoint", path=path, step=step, state="committed", manifest_sha256="ab" * 32)
    emit("termination", reason="succeeded")
    out.flush()
    """
)


def test_a_job_that_prints_300_mb_keeps_its_whole_receipt(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    service = JobService(ledger, {"local": LocalBackend(grace_s=0.5)}, tmp_path / "home", sys.executable)
    add_queued_run(ledger, "jt-loud0000", script=LOUD)
    ended = wait_until_terminal(lambda: service.inspect("jt-loud0000"), 240, "the loud job to end")
    assert ended.termination_reason == "succeeded", ended.termination_message

    steps = [e["step"] for e in ledger.events("jt-loud0000/1", "step")]
    assert steps == list(range(1, 101))
    committed = [c.step for c in ledger.checkpoints("jt-loud0000/1") if c.state == "committed"]
    assert sorted(committed) == list(range(10, 101, 10))
    assert ledger.events("jt-loud0000/1", "termination")[-1]["reason"] == "succeeded"

    workdir = Path(ledger.attempts("jt-loud0000")[0].placement.workdir)
    assert (workdir / logpump.LOG).stat().st_size <= logpump.DEFAULT_MAX_BYTES + 4096
    logs = service.logs("jt-loud0000", tail=3)
    assert logs.finished and logs.lines[-1].startswith("JOBTRAIL ") and '"termination"' in logs.lines[-1]
    first = service.logs("jt-loud0000", tail=5000, cursor=0)
    later = service.logs("jt-loud0000", tail=1, cursor=(logpump.DEFAULT_MAX_BYTES // 2) + 1000)
    assert first.lines and later.lines[0].startswith("[jobtrail] ") and "bytes" in later.lines[0]
