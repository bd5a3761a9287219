"""The HF Jobs backend through the real huggingface_hub client against the offline emulator."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest

from jobtrail.backends.hf_jobs import COMPLETE, SCRIPT_VARIABLE, HfJobsBackend, unpack_script
from jobtrail.errors import BackendError
from jobtrail.models import LaunchRequest
from support.waiting import wait_for

TOKEN = "hf_alice_write_token_0123456789"


@pytest.fixture
def backend(hub) -> HfJobsBackend:
    hub.add_token(TOKEN, "alice")
    return HfJobsBackend(token=TOKEN)


def _request(tmp_path: Path, script: str, **kw) -> LaunchRequest:
    return LaunchRequest(
        attempt_id="jt-test/1",
        script=textwrap.dedent(script),
        workdir=str(tmp_path / "attempt-1"),
        env={"JOBTRAIL_RUN_ID": "jt-test"},
        secrets={"HF_TOKEN": TOKEN},
        labels={"jobtrail-run": "jt-test", "jobtrail-attempt": "1", "jobtrail-config-sha256": "ab" * 32},
        **kw,
    )


def _exited(backend, placement):
    probe = backend.probe(placement)
    return probe if probe.phase == "exited" else None


def _all_lines(backend, placement) -> list[str]:
    def complete() -> bool:
        if (Path(placement.workdir) / COMPLETE).exists():
            return True
        backend.read_log(placement)  # keeps a log follower running until the log is complete
        return False

    wait_for(complete, 30, "the log to be complete")
    return backend.read_log(placement).lines


def test_inline_script_runs_with_labels_secrets_and_real_logs(backend, hub, tmp_path):
    placement = backend.launch(
        _request(
            tmp_path,
            f"""
        import os
        print("hello from the job")
        print("token matches:", os.environ["HF_TOKEN"] == {TOKEN!r})
        print("run:", os.environ["JOBTRAIL_RUN_ID"])
    """,
            flavor="cpu-basic",
            timeout_s=600,
        )
    )
    assert placement.backend == "hf-jobs" and placement.remote_id and placement.namespace == "alice"
    assert placement.url.endswith(f"/jobs/alice/{placement.remote_id}")
    assert placement.image.startswith("ghcr.io/astral-sh/uv")
    job = hub.jobs[placement.remote_id]
    assert job.spec["labels"] == {
        "jobtrail-run": "jt-test",
        "jobtrail-attempt": "1",
        "jobtrail-config-sha256": "ab" * 32,
        "name": "jobtrail-jt-test-1",
    }
    assert job.spec["secrets"] == {"HF_TOKEN": None} and job.spec["flavor"] == "cpu-basic"
    assert job.spec["timeoutSeconds"] == 600 and job.spec["command"][0] == "bash"
    assert not any("/preupload/" in path or "/commit/" in path for _, path in hub.requests), "nothing is uploaded"
    record = wait_for(lambda: _exited(backend, placement), 60, "the job to end").exit
    assert record.exit_code == 0 and not record.timed_out
    lines = _all_lines(backend, placement)
    printed = [line for line in lines if not line.startswith("=====")]
    assert printed == ["hello from the job", "token matches: True", "run: jt-test"]
    # Cursors are bytes of all the job printed, as on the local backend.
    second = len(lines[0].encode()) + 1
    page = backend.read_log(placement, second, max_lines=1)
    assert page.lines == [lines[1]] and page.offset == second + len(lines[1].encode()) + 1
    size = sum(len(line.encode()) + 1 for line in lines)
    assert page.end == size and backend.read_log(placement, size + 5).end == size


def test_a_script_larger_than_an_environment_string_may_be_runs_whole(backend, hub, tmp_path):
    # Linux refuses an environment string over 128 KiB (MAX_ARG_STRLEN): a script with its runtime inlined is
    # about that size, so it travels compressed.
    filler = "".join(f"# line {i} of a long inlined runtime\n" for i in range(6000))
    script = f"import hashlib\n{filler}print(hashlib.sha256(open(__file__, 'rb').read()).hexdigest())\n"
    assert len(script.encode()) > 128 * 1024
    placement = backend.launch(_request(tmp_path, script))
    assert unpack_script(hub.jobs[placement.remote_id].spec["environment"][SCRIPT_VARIABLE]) == script
    assert wait_for(lambda: _exited(backend, placement), 60, "the job to end").exit.exit_code == 0
    printed = [line for line in _all_lines(backend, placement) if not line.startswith("=====")]
    assert printed == [hashlib.sha256(script.encode()).hexdigest()]


def test_the_log_mirror_hides_the_token_and_the_secrets_in_every_form_even_after_a_restart(hub, tmp_path, monkeypatch):
    hub.add_token(TOKEN, "alice")
    value = 'an "api" key\\with-ünïcode mkHFx9'
    monkeypatch.setenv("JT_TEST_API_KEY", value)
    script = """
        import json, os
        for name in ("HF_TOKEN", "API_KEY"):
            value = os.environ[name]
            print(value, repr(value), json.dumps(value), json.dumps(value, ensure_ascii=False), value.encode())
            print("JOBTRAIL " + json.dumps({"event": "warning", "code": name, "message": value}))
    """
    request = _request(tmp_path, script).model_copy(
        update={"secrets": {"HF_TOKEN": TOKEN, "API_KEY": value}, "secret_sources": ["JT_TEST_API_KEY"]}
    )
    placement = HfJobsBackend(token=TOKEN).launch(request)
    assert placement.secret_sources == ["JT_TEST_API_KEY"]
    # Another server process follows the log: it knows the secrets only by where they came from.
    follower = HfJobsBackend(token=TOKEN)
    wait_for(lambda: _exited(follower, placement), 60, "the job to end")
    lines = _all_lines(follower, placement)
    mirror = (Path(placement.workdir) / "job.log").read_bytes()
    assert b"mkHFx9" not in mirror and TOKEN.encode() not in mirror
    events = [json.loads(line.removeprefix("JOBTRAIL ")) for line in lines if line.startswith("JOBTRAIL ")]
    assert [(e["code"], e["message"]) for e in events] == [("HF_TOKEN", "[REDACTED]"), ("API_KEY", "[REDACTED]")]


def test_failure_carries_the_exit_code(backend, tmp_path):
    placement = backend.launch(_request(tmp_path, "import sys\nprint('bad')\nsys.exit(3)\n"))
    record = wait_for(lambda: _exited(backend, placement), 60, "the job to fail").exit
    assert record.exit_code == 3 and not record.cancelled


def test_cancel_ends_canceled(backend, tmp_path):
    placement = backend.launch(_request(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(60)\n"))
    wait_for(lambda: backend.probe(placement).phase == "running", 30, "the job to run")
    backend.cancel(placement)
    record = wait_for(lambda: _exited(backend, placement), 30, "the job to be cancelled").exit
    assert record.cancelled


def test_timeout_ends_in_error_marked_timed_out(backend, tmp_path):
    placement = backend.launch(_request(tmp_path, "import time\ntime.sleep(60)\n", timeout_s=1))
    record = wait_for(lambda: _exited(backend, placement), 30, "the timeout").exit
    assert record.timed_out and "timed out" in record.message.lower()


def test_a_dropped_log_stream_is_resumed_without_losing_or_repeating_lines(backend, hub, tmp_path):
    hub.inject.drop_logs_after(3, times=2)
    placement = backend.launch(
        _request(
            tmp_path,
            """
        import time
        for i in range(12):
            print(f"line {i}", flush=True)
            time.sleep(0.1)
    """,
        )
    )
    wait_for(lambda: _exited(backend, placement), 60, "the job to end")
    lines = [line for line in _all_lines(backend, placement) if line.startswith("line ")]
    assert lines == [f"line {i}" for i in range(12)]


@pytest.mark.parametrize(("status", "words"), [(401, "invalid or expired"), (403, "job.write")])
def test_auth_failures_name_the_fix(backend, hub, tmp_path, status, words):
    hub.inject.jobs_auth_error(status)
    with pytest.raises(BackendError) as info:
        backend.launch(_request(tmp_path, "print(1)\n"))
    assert info.value.reason == "auth_error" and words in str(info.value) and info.value.fix
    assert TOKEN not in str(info.value)


def test_an_unknown_job_is_lost(backend, tmp_path):
    placement = backend.launch(_request(tmp_path, "print(1)\n"))
    gone = placement.model_copy(update={"remote_id": "000000000000000000000000"})
    assert backend.probe(gone).phase == "lost"


def test_a_job_another_account_launched_is_not_called_lost_when_this_token_cannot_find_it(hub, backend, tmp_path):
    """Servers sharing a ledger may hold different accounts' tokens: only the launching namespace's server may
    conclude that a job is gone (a retry would pay for it twice)."""
    hub.add_token("hf_bob_write_token_0123456789", "bob", orgs=["team"])
    placement = backend.launch(_request(tmp_path, "print(1)\n"))
    elsewhere = placement.model_copy(update={"namespace": "team", "remote_id": "000000000000000000000000"})
    with pytest.raises(BackendError) as info:
        HfJobsBackend(token="hf_bob_write_token_0123456789").probe(elsewhere)
    assert info.value.fix and "team" in info.value.fix and "bob" in str(info.value)
    assert HfJobsBackend(token="hf_bob_write_token_0123456789", namespace="team").probe(elsewhere).phase == "lost"


def test_its_host_is_the_namespace_it_launches_in_and_a_failed_look_up_is_not_asked_again_at_once(hub, tmp_path):
    """A remote attempt belongs to the namespace its job was submitted for: the backend's host is where it launches
    (JOBTRAIL_HF_NAMESPACE, else the token's user, by whoami), the placement's namespace too. whoami is rate-limited:
    a failed look-up answers its error again for a while instead of asking at every refresh."""
    hub.add_token(TOKEN, "alice", orgs=["team"])
    mine = HfJobsBackend(token=TOKEN)
    assert mine.host == "alice" and mine.launch(_request(tmp_path, "print(1)\n")).namespace == "alice"
    assert HfJobsBackend(token=TOKEN, namespace="team").host == "team"
    stranger = HfJobsBackend(token="hf_nobody_token_0123456789")
    for _ in range(2):
        with pytest.raises(BackendError) as failed:
            assert stranger.host is None  # never reached: it raises
        assert failed.value.reason == "auth_error" and "HF_TOKEN" in (failed.value.fix or "")
    assert sum("whoami" in path for _, path in hub.requests) == 2  # alice's, then the stranger's once
