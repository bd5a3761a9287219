"""The local runner with real processes: tiny Python jobs, no ML.

Every wait is on a condition with a deadline; job scripts that must pause block on a
`release` file the test creates, never on a sleep the test hopes is long enough.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobtrail
from jobtrail.backends.local import MAX_LOG_CHUNK, OUTPUT_DIR_ENV, LocalBackend
from jobtrail.errors import BackendError, InvalidRequestError
from jobtrail.models import ExitRecord, LaunchRequest, Placement, Probe
from jobtrail.templates.render import runtime_block, scripts_dir
from support.jobs import WAIT_FOR_RELEASE
from support.processes import alive, live_group_members
from support.waiting import wait_for

# A job that starts a grandchild (in its own process group) and then idles.
WITH_GRANDCHILD = textwrap.dedent(
    """\
    import subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print("grandchild", grandchild.pid)
    time.sleep(60)
    """
)


def ended(probe: Probe) -> Probe | None:
    return probe if probe.phase != "running" else None


class Jobs:
    """Launches jobs under tmp_path and makes sure none outlives its test."""

    def __init__(self, backend: LocalBackend, root: Path) -> None:
        self.backend = backend
        self.root = root
        self.placements: list[Placement] = []

    def start(self, script: str, name: str = "job", **request: Any) -> Placement:
        workdir = self.root / name
        placement = self.backend.launch(
            LaunchRequest(attempt_id=name, script=textwrap.dedent(script), workdir=str(workdir), **request)
        )
        self.placements.append(placement)
        return placement

    def wait_exit(self, placement: Placement, timeout: float = 10.0) -> ExitRecord:
        probe = wait_for(lambda: ended(self.backend.probe(placement)), timeout, "the job to end")
        assert probe.phase == "exited", probe
        assert probe.exit is not None
        return probe.exit

    def wait_line(self, placement: Placement, prefix: str) -> str:
        def find() -> str | None:
            lines = self.backend.read_log(placement).lines
            return next((line for line in lines if line.startswith(prefix)), None)

        return wait_for(find, what=f"a log line starting with {prefix!r}")

    def cleanup(self) -> None:
        for placement in self.placements:
            if self.backend.probe(placement).phase == "running":
                self.backend.cancel(placement)
                self.wait_exit(placement)


@pytest.fixture
def backend() -> LocalBackend:
    return LocalBackend(grace_s=0.5)


@pytest.fixture
def jobs(backend: LocalBackend, tmp_path: Path) -> Iterator[Jobs]:
    runner = Jobs(backend, tmp_path)
    yield runner
    runner.cleanup()


def test_success_reads_log_incrementally_and_holds_back_partial_line(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start(
        WAIT_FOR_RELEASE
        + textwrap.dedent(
            """\
            import sys
            print("line1")
            print("line2")
            sys.stdout.write("part")
            wait_for_release()
            sys.stdout.write("ial\\nlast-no-newline")
            """
        )
    )
    assert placement.backend == "local" and placement.pid and placement.pgid
    assert Path(placement.workdir).is_absolute()
    log = Path(placement.workdir) / "job.log"
    wait_for(lambda: log.exists() and log.read_bytes() == b"line1\nline2\npart", what="the first output")

    first = backend.read_log(placement, 0)
    assert (first.lines, first.offset) == (["line1", "line2"], 12)
    held = backend.read_log(placement, first.offset)
    assert (held.lines, held.offset) == ([], 12), "a running job's partial line must wait"
    assert backend.probe(placement).phase == "running"

    (Path(placement.workdir) / "release").touch()
    record = jobs.wait_exit(placement)
    assert (record.exit_code, record.signal, record.timed_out, record.cancelled) == (0, None, False, False)

    rest = backend.read_log(placement, first.offset)
    assert rest.lines == ["partial", "last-no-newline"]
    assert rest.offset == log.stat().st_size
    assert backend.read_log(placement, rest.offset).lines == []
    assert backend.read_log(placement, 3).end == backend.read_log(placement, rest.offset).end == rest.offset


def test_max_lines_stops_right_after_the_last_line_even_with_invalid_utf8(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start("import sys\nsys.stdout.buffer.write(b'a\\xff\\xfe\\nb\\nc\\n')")
    jobs.wait_exit(placement)
    first = backend.read_log(placement, 0, max_lines=1)
    assert first.lines == ["a\ufffd\ufffd"] and first.offset == 4
    rest = backend.read_log(placement, first.offset, max_lines=5)
    assert rest.lines == ["b", "c"] and rest.offset == 8


def test_nonzero_exit_code_and_stderr_in_log(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start("import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    record = jobs.wait_exit(placement)
    assert (record.exit_code, record.signal) == (3, None)
    assert backend.read_log(placement).lines == ["boom"]


def test_death_by_signal_is_recorded(jobs: Jobs) -> None:
    placement = jobs.start("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    record = jobs.wait_exit(placement)
    assert (record.exit_code, record.signal, record.cancelled) == (None, signal.SIGKILL, False)


def test_stray_processes_do_not_outlive_a_finished_job(jobs: Jobs) -> None:
    placement = jobs.start(
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    )
    record = jobs.wait_exit(placement)
    assert record.exit_code == 0
    assert placement.pgid is not None and live_group_members(placement.pgid) == []


def test_cancel_stops_the_whole_group(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start(WITH_GRANDCHILD)
    grandchild = int(jobs.wait_line(placement, "grandchild ").split()[1])
    assert alive(grandchild)

    started = time.monotonic()
    backend.cancel(placement)
    record = jobs.wait_exit(placement, timeout=5)
    assert time.monotonic() - started < 5
    assert record.cancelled and not record.timed_out
    assert record.signal == signal.SIGTERM
    assert placement.pgid is not None
    with pytest.raises(ProcessLookupError):  # not even a zombie is left in the group
        os.killpg(placement.pgid, 0)
    assert not alive(grandchild)

    exit_file = Path(placement.workdir) / "exit.json"
    before = exit_file.read_bytes()
    backend.cancel(placement)  # cancelling an ended attempt changes nothing
    assert exit_file.read_bytes() == before


def test_cancel_of_an_attempt_that_already_ended_is_a_no_op(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start("print('done')\n")
    assert not jobs.wait_exit(placement).cancelled
    backend.cancel(placement)
    assert not (Path(placement.workdir) / "cancel-requested").exists()
    assert not jobs.wait_exit(placement).cancelled


def test_job_ignoring_sigterm_is_killed_after_grace(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start(
        """\
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready")
        time.sleep(60)
        """
    )
    jobs.wait_line(placement, "ready")
    backend.cancel(placement)
    record = jobs.wait_exit(placement, timeout=5)
    assert record.signal == signal.SIGKILL
    assert record.cancelled


def test_timeout_stops_the_job(jobs: Jobs) -> None:
    placement = jobs.start("import time\ntime.sleep(60)\n", timeout_s=1)
    record = jobs.wait_exit(placement, timeout=6)
    assert record.timed_out and not record.cancelled
    assert record.signal == signal.SIGTERM


def two_workers(work: str) -> str:
    """A job running `work` (one statement) in two workers under torch's elastic launcher, started by the
    job runtime's run_job as a rendered training script starts them."""
    main = f"def work():\n    {work}\n\n\nif __name__ == '__main__':\n    run_job(work, {{'num_processes': 2}})\n"
    # The runtime as a rendered job inlines it: _runtime.py with the runtime modules it imports (_disk ...) first.
    block = "# --- jobtrail:runtime ---\nfrom _runtime import run_job\n# --- end jobtrail:runtime ---\n"
    runtime = runtime_block(block, scripts_dir())
    return runtime + "\n\n" + main


def test_a_job_of_two_workers_is_stopped_whole_at_its_timeout(tmp_path: Path) -> None:
    backend = LocalBackend(grace_s=10)  # the default grace: time for the launcher to stop its workers itself
    jobs = Jobs(backend, tmp_path)
    try:
        # Long enough for both workers to start (each imports torch) on a loaded machine.
        placement = jobs.start(two_workers("print('worker up', flush=True); time.sleep(120)"), timeout_s=20)
        up = wait_for(lambda: backend.read_log(placement).lines.count("worker up") == 2, 20, "both workers to start")
        assert up
        record = jobs.wait_exit(placement, timeout=40)
    finally:
        jobs.cleanup()
    assert record.timed_out and record.exit_code == 143  # the launcher forwarded the SIGTERM and ended by it
    assert placement.pgid is not None and live_group_members(placement.pgid) == []


def probe_from_new_process(placement: Placement) -> Probe:
    """A server restart: a fresh interpreter with a fresh LocalBackend and only the placement."""
    code = (
        "import sys\n"
        "from jobtrail.backends.local import LocalBackend\n"
        "from jobtrail.models import Placement\n"
        "print(LocalBackend().probe(Placement.model_validate_json(sys.argv[1])).model_dump_json())\n"
    )
    src = str(Path(jobtrail.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", code, placement.model_dump_json()],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env=env,
    )
    return Probe.model_validate_json(done.stdout)


def test_a_new_backend_in_a_new_process_finds_the_attempt(jobs: Jobs) -> None:
    placement = jobs.start(WAIT_FOR_RELEASE + "wait_for_release()\nraise SystemExit(5)\n")
    assert probe_from_new_process(placement).phase == "running"
    (Path(placement.workdir) / "release").touch()
    probe = wait_for(lambda: ended(probe_from_new_process(placement)), timeout=20, what="the job to end")
    assert probe.phase == "exited"
    assert probe.exit is not None and probe.exit.exit_code == 5


def test_a_launch_that_was_never_recorded_is_found_by_its_workdir(jobs: Jobs, tmp_path: Path) -> None:
    placement = jobs.start(WAIT_FOR_RELEASE + "wait_for_release()\nprint('done')\n")
    # A restarted server knows only the attempt's workdir: the placement its launcher got was never recorded.
    fresh = LocalBackend(grace_s=0.5)
    found = fresh.find({}, placement.workdir, [])
    assert found is not None
    assert (found.pid, found.pgid, found.workdir, found.host) == (
        placement.pid,
        placement.pgid,
        placement.workdir,
        placement.host,
    )
    assert fresh.probe(found).phase == "running"
    (Path(placement.workdir) / "release").touch()
    probe = wait_for(lambda: ended(fresh.probe(found)), timeout=20, what="the job to end")
    assert probe.phase == "exited" and probe.exit is not None and probe.exit.exit_code == 0
    (tmp_path / "claimed-only").mkdir()  # its claimant died before launching anything there
    assert fresh.find({}, str(tmp_path / "claimed-only"), []) is None
    assert fresh.find({}, str(tmp_path / "never-made"), []) is None


def test_lost_when_supervisor_and_job_are_killed_and_leftovers_are_stopped(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start(WITH_GRANDCHILD)
    grandchild = int(jobs.wait_line(placement, "grandchild ").split()[1])
    state = json.loads((Path(placement.workdir) / "supervisor.json").read_text())
    supervisor = placement.pid
    assert supervisor is not None

    os.kill(supervisor, signal.SIGKILL)  # first, or it would record the job's death
    wait_for(lambda: not alive(supervisor), what="the supervisor to die")
    os.kill(state["child_pid"], signal.SIGKILL)
    wait_for(lambda: not alive(state["child_pid"]), what="the job to die")
    assert alive(grandchild)

    assert backend.probe(placement).phase == "lost"
    wait_for(lambda: not alive(grandchild), timeout=5, what="the leftover grandchild to be killed")
    assert not (Path(placement.workdir) / "exit.json").exists()


def test_reused_pids_are_neither_trusted_nor_killed(backend: LocalBackend, tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        placement = Placement(
            backend="local", host=socket.gethostname(), pid=stranger.pid, pgid=stranger.pid,
            workdir=str(tmp_path), started_at=time.time(),
        )  # fmt: skip
        assert backend.probe(placement).phase == "lost"
        backend.cancel(placement)
        assert stranger.poll() is None and alive(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait(timeout=10)


def test_a_job_that_prints_its_secrets_leaves_them_redacted_in_the_log(jobs: Jobs, backend: LocalBackend) -> None:
    long, short = f"hf_{uuid.uuid4().hex}", "pw-12345"
    placement = jobs.start(
        textwrap.dedent(
            """\
            import os, sys
            print("token", os.environ["HF_TOKEN"], "and", os.environ["DB_PASSWORD"])
            sys.stderr.write("err " + os.environ["HF_TOKEN"][:4] + os.environ["HF_TOKEN"][4:] + "\\n")
            sys.stdout.write("no newline " + os.environ["DB_PASSWORD"])
            """
        ),
        secrets={"HF_TOKEN": long, "DB_PASSWORD": short},
    )
    assert jobs.wait_exit(placement).exit_code == 0
    lines = backend.read_log(placement).lines
    assert sorted(lines) == sorted(["token [REDACTED] and [REDACTED]", "err [REDACTED]", "no newline [REDACTED]"])
    for f in Path(placement.workdir).rglob("*"):
        if f.is_file():
            assert long.encode() not in f.read_bytes() and short.encode() not in f.read_bytes(), f.name


def test_secrets_reach_the_job_but_no_file_and_no_argv(jobs: Jobs, backend: LocalBackend) -> None:
    secret = f"hf_{uuid.uuid4().hex}"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    placement = jobs.start(
        WAIT_FOR_RELEASE
        + textwrap.dedent(
            f"""\
            import hashlib
            token = os.environ.get("HF_TOKEN", "")
            print("secret matched:", hashlib.sha256(token.encode()).hexdigest() == {digest!r})
            print("plain:", os.environ.get("PLAIN_SETTING"))
            wait_for_release()
            """
        ),
        env={"PLAIN_SETTING": "visible"},
        secrets={"HF_TOKEN": secret},
    )
    jobs.wait_line(placement, "plain:")
    state = json.loads((Path(placement.workdir) / "supervisor.json").read_text())
    for pid in (state["supervisor_pid"], state["child_pid"]):
        assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()

    (Path(placement.workdir) / "release").touch()
    assert jobs.wait_exit(placement).exit_code == 0
    assert backend.read_log(placement).lines == ["secret matched: True", "plain: visible"]
    files = [f for f in Path(placement.workdir).rglob("*") if f.is_file()]
    assert {f.name for f in files} >= {"script.py", "job.log", "supervisor.json", "exit.json"}
    for f in files:
        assert secret.encode() not in f.read_bytes(), f"the secret leaked into {f.name}"


AWKWARD_SECRETS = {
    "QUOTED_KEY": 'a "quoted" \\back\\slash mkQx1',
    "UNICODE_KEY": "clé-秘密-🔑 mkUx2",
    "CONTROL_KEY": "tab\tesc\x1b[0m\x07 mkCx3",
}


def test_secrets_are_hidden_in_every_printed_form_and_event_lines_still_parse(
    jobs: Jobs, backend: LocalBackend
) -> None:
    placement = jobs.start(
        textwrap.dedent(
            """\
            import json, os, sys
            for name in ("QUOTED_KEY", "UNICODE_KEY", "CONTROL_KEY"):
                value = os.environ[name]
                print(value, repr(value), json.dumps(value), json.dumps(value, ensure_ascii=False))
                print("JOBTRAIL " + json.dumps({"event": "warning", "code": name, "message": repr(value) + value}))
                sys.stderr.write(ascii(value) + str(value.encode()) + json.dumps(repr(value)) + "\\n")
            """
        ),
        secrets=AWKWARD_SECRETS,
    )
    assert jobs.wait_exit(placement).exit_code == 0
    log = (Path(placement.workdir) / "job.log").read_bytes()
    for marker in (b"mkQx1", b"mkUx2", b"mkCx3"):
        assert marker not in log, log
    events = [
        json.loads(line.removeprefix("JOBTRAIL ")) for line in backend.read_log(placement).lines if "JOBTRAIL" in line
    ]
    assert [e["code"] for e in events] == list(AWKWARD_SECRETS)
    assert all(e["message"] == "'[REDACTED]'[REDACTED]" for e in events), events


def test_no_secret_overrides_the_variables_jobtrail_gives_the_job(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start(
        'import os\nprint("run:", os.environ["JOBTRAIL_RUN_ID"])\n',
        env={"JOBTRAIL_RUN_ID": "jt-real"},
        secrets={"JOBTRAIL_RUN_ID": "jt-from-a-secret"},
    )
    assert jobs.wait_exit(placement).exit_code == 0
    assert backend.read_log(placement).lines == ["run: jt-real"]


def test_the_job_gets_its_output_dir_and_never_the_servers(
    jobs: Jobs, backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose CONFIG names no output_dir writes where the request says (JOBTRAIL_OUTPUT_DIR); a value the
    server's own environment happens to hold never reaches a job that was given none."""
    monkeypatch.setenv(OUTPUT_DIR_ENV, "/the/servers/own")
    show = f'import os\nprint("out:", os.environ.get("{OUTPUT_DIR_ENV}"))\n'
    given = jobs.start(show, name="given", output_dir=str(tmp_path / "run" / "output"))
    none = jobs.start(show, name="none")
    for placement, expected in ((given, str(tmp_path / "run" / "output")), (none, "None")):
        assert jobs.wait_exit(placement).exit_code == 0
        assert backend.read_log(placement).lines == [f"out: {expected}"]


def test_a_secret_across_the_pieces_of_an_oversized_line_is_still_hidden(jobs: Jobs, backend: LocalBackend) -> None:
    secret = f"hf_{uuid.uuid4().hex}"
    placement = jobs.start(
        f"""\
        import os, sys
        for offset in range(-40, 41, 8):  # the secret straddles the point where the line is cut
            sys.stdout.write("x" * ({MAX_LOG_CHUNK} + offset) + os.environ["HF_TOKEN"] + "y" * 10 + "\\n")
        """,
        secrets={"HF_TOKEN": secret},
    )
    jobs.wait_exit(placement)
    assert secret.encode() not in (Path(placement.workdir) / "job.log").read_bytes()


def test_everything_the_supervisor_and_the_job_write_is_private_under_umask_022(
    jobs: Jobs, backend: LocalBackend
) -> None:
    previous = os.umask(0o022)
    try:
        placement = jobs.start(
            """\
            import os
            os.makedirs("out/checkpoint-1")
            with open("out/checkpoint-1/weights.bin", "wb") as f:
                f.write(b"w")
            print("done")
            """,
            secrets={"HF_TOKEN": f"hf_{uuid.uuid4().hex}"},
        )
        assert jobs.wait_exit(placement).exit_code == 0
        backend.cancel(placement)  # after the end: writes nothing, and must not widen anything
    finally:
        os.umask(previous)
    workdir = Path(placement.workdir)
    paths = [workdir, *workdir.rglob("*")]
    assert {p.name for p in paths} >= {
        "script.py",
        "job.log",
        "supervisor.json",
        "exit.json",
        "supervisor.log",
        "weights.bin",
    }
    wrong = {
        str(p): oct(p.stat().st_mode & 0o777)
        for p in paths
        if p.stat().st_mode & 0o777 != (0o700 if p.is_dir() else 0o600)
    }
    assert not wrong, wrong


def test_log_reads_are_capped_and_an_oversized_line_comes_in_pieces(jobs: Jobs, backend: LocalBackend) -> None:
    placement = jobs.start(
        f"""\
        import sys
        for i in range(1500):
            print(f"{{i:04d}}" + "y" * 995)
        sys.stdout.write("x" * {MAX_LOG_CHUNK + 100} + "\\n")
        """
    )
    jobs.wait_exit(placement)
    lines: list[str] = []
    offset = 0
    while (chunk := backend.read_log(placement, offset)).lines:
        assert 0 < chunk.offset - offset <= MAX_LOG_CHUNK
        lines += chunk.lines
        offset = chunk.offset
    assert lines[:1500] == [f"{i:04d}" + "y" * 995 for i in range(1500)]
    assert "".join(lines[1500:]) == "x" * (MAX_LOG_CHUNK + 100)
    assert offset == (Path(placement.workdir) / "job.log").stat().st_size


def test_read_log_before_any_output_and_bad_offset(backend: LocalBackend, tmp_path: Path) -> None:
    placement = Placement(backend="local", host="h", workdir=str(tmp_path), started_at=0.0)
    chunk = backend.read_log(placement, 0)
    assert (chunk.lines, chunk.offset) == ([], 0)
    with pytest.raises(InvalidRequestError):
        backend.read_log(placement, -1)


def test_launch_refuses_a_missing_interpreter(tmp_path: Path) -> None:
    backend = LocalBackend(python=str(tmp_path / "no-such-python"))
    with pytest.raises(BackendError) as raised:
        backend.launch(LaunchRequest(attempt_id="a", script="", workdir=str(tmp_path / "a")))
    assert raised.value.fix


def test_launch_refuses_an_uncreatable_or_used_workdir(jobs: Jobs, backend: LocalBackend, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(BackendError) as raised:
        backend.launch(LaunchRequest(attempt_id="a", script="", workdir=str(blocker / "sub")))
    assert raised.value.fix

    placement = jobs.start("pass\n", name="used")
    jobs.wait_exit(placement)
    with pytest.raises(BackendError, match="already holds an attempt"):
        backend.launch(LaunchRequest(attempt_id="b", script="", workdir=placement.workdir))
