"""Hugging Face Jobs backend: every call goes through huggingface_hub's HfApi (no hand-written HTTP).

The rendered script travels inline in the job's environment (JOBTRAIL_SCRIPT_GZIP: gzip, then base64) and
a tiny bash command writes it to a file and runs it with `uv run` in the uv image, so nothing is uploaded
before the job starts. Logs are followed in a background thread into the attempt's local directory, as a local
job's are pumped: `job.log` capped at JOBTRAIL_LOG_MAX_BYTES, every event also in `job.events`, never capped
(hf_logs.py), resuming after what was copied when a stream drops or a server restarts, so reading logs never
waits on the network, a tool call never hangs, and the reads are bounded however much the job prints. Every line
is redacted before it is written there: the token, the values of the attempt's secret sources and every
credential of the server's environment (util/redaction.credential_values), in every printed form. The job's
environment is the request's alone (its per-attempt variables and the named secrets): nothing of the server's.
"""

from __future__ import annotations

import base64
import gzip
import os
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from jobtrail.backends import hf_logs, joblog, logpump
from jobtrail.backends.registry import HF_JOBS
from jobtrail.errors import BackendError, InvalidRequestError
from jobtrail.models import ExitRecord, LaunchRequest, LogChunk, Placement, Probe
from jobtrail.util.files import private_dir, write_private
from jobtrail.util.redaction import Redactor, credential_values

if TYPE_CHECKING:
    from huggingface_hub import HfApi, JobInfo

UV_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
DEFAULT_FLAVOR = "cpu-basic"  # what a job without a flavor runs on (HF's own default too)
# The script is in an environment variable, so no quoting of its text is ever needed. Compressed: Linux takes
# no environment string over 128 KiB (MAX_ARG_STRLEN), and a script with its runtime inlined is about that
# (an evaluation's, a GRPO job's); gzip makes it a third. base64 and gunzip are in every Debian image.
SCRIPT_VARIABLE = "JOBTRAIL_SCRIPT_GZIP"
COMMAND = [
    "bash",
    "-c",
    f'f="$(mktemp -d)/job.py" && printf "%s" "${SCRIPT_VARIABLE}" | base64 -d | gunzip > "$f" && exec uv run "$f"',
]
COMPLETE = "job.log.complete"
FOLLOW_RETRIES = 8  # reconnects of one follower before it waits for the next read to restart it
# Followers of an ended job that gave up (FOLLOW_RETRIES each) before probe says "exited" with its copy unfinished.
COPY_FAILURES = 2
TERMINAL = {"COMPLETED", "ERROR", "CANCELED", "DELETED"}
# whoami is rate-limited, and a server asks whose an attempt is at every refresh: after a failed look-up, `host`
# answers that failure for this long before asking again.
NAMESPACE_RETRY_S = 60.0


class HfJobsBackend:
    traits = HF_JOBS
    name = HF_JOBS.name
    max_concurrent: int | None = None  # HF Jobs queues on its side

    def __init__(
        self,
        token: str | None,
        namespace: str | None = None,
        image: str = UV_IMAGE,
        log_max_bytes: int = logpump.DEFAULT_MAX_BYTES,
    ) -> None:
        self._token = token
        self._namespace = namespace
        self._namespace_failed: tuple[float, BackendError] | None = None  # when, and why, it last could not be learned
        self._api: HfApi | None = None
        self.image = image
        self.log_max_bytes = log_max_bytes  # the copy's job.log at most (JOBTRAIL_LOG_MAX_BYTES); events uncapped
        self._followers: dict[str, threading.Thread] = {}
        self._failed_copies: dict[str, int] = {}  # remote job id -> its followers in this process that gave up
        self._lock = threading.Lock()

    # --- Backend protocol -------------------------------------------------------------

    @property
    def host(self) -> str:
        """The namespace this backend launches jobs in (namespace()): a remote attempt belongs to the namespace its
        job was submitted for, and only a server launching there starts, follows and stops it (servers sharing a
        ledger may hold other accounts' tokens). Raises BackendError when it cannot be learned now."""
        failed = self._namespace_failed
        if self._namespace is None and failed is not None and time.monotonic() - failed[0] < NAMESPACE_RETRY_S:
            raise BackendError(failed[1].message, failed[1].fix, failed[1].reason)
        try:
            return self.namespace()
        except BackendError as exc:
            self._namespace_failed = (time.monotonic(), exc)
            raise

    def launch(self, request: LaunchRequest) -> Placement:
        api = self.api()
        namespace = self.namespace()
        private_dir(Path(request.workdir))
        logpump.prepare(Path(request.workdir))
        env = {**request.env, "PYTHONUNBUFFERED": "1", SCRIPT_VARIABLE: pack_script(request.script)}
        env["JOBTRAIL_IMAGE"] = self.image
        try:
            job = api.run_job(
                image=self.image,
                command=COMMAND,
                env=env,
                secrets=dict(request.secrets),
                flavor=request.flavor or DEFAULT_FLAVOR,
                timeout=request.timeout_s,
                labels=request.labels,
                name="jobtrail-" + request.attempt_id.replace("/", "-"),
                namespace=namespace,
            )
        except Exception as exc:
            raise _backend_error("start the job", exc) from exc
        return self._placement(job, namespace, request.workdir, request.secret_sources, time.time(), request.flavor)

    def find(self, labels: dict[str, str], workdir: str, secret_sources: list[str]) -> Placement | None:
        """The newest job with these labels (jobtrail's run id, attempt and config sha256) in the namespace."""
        namespace = self.namespace()
        try:
            found = list(self.api().list_jobs(labels=labels, namespace=namespace))
        except Exception as exc:
            raise _backend_error("list the jobs", exc) from exc
        if not found:
            return None
        job = max(found, key=lambda j: j.created_at.timestamp() if j.created_at else 0.0)
        started = job.started_at or job.created_at
        return self._placement(job, namespace, workdir, secret_sources, started.timestamp() if started else time.time())

    def _placement(
        self,
        job: JobInfo,
        namespace: str,
        workdir: str,
        secret_sources: list[str],
        started_at: float,
        flavor: str | None = None,
    ) -> Placement:
        return Placement(
            backend=self.name,
            host=_host(job.url),
            workdir=workdir,
            started_at=started_at,
            remote_id=job.id,
            namespace=namespace,
            url=job.url,
            flavor=job.flavor or flavor,
            image=job.docker_image or self.image,
            secret_sources=secret_sources,
        )

    def probe(self, placement: Placement) -> Probe:
        try:
            job = self.api().inspect_job(job_id=_remote(placement), namespace=placement.namespace)
        except Exception as exc:
            if _status(exc) == 404 and placement.namespace in (None, self.namespace()):
                return Probe(phase="lost")
            if _status(exc) == 404:
                # Servers sharing a ledger may hold tokens of other accounts: "not found" in a namespace this
                # server does not run jobs in may mean "not yours to see". Calling it lost would start a paid
                # duplicate; the server of that namespace decides.
                raise BackendError(
                    f"HF Jobs does not show job {placement.remote_id} in namespace {placement.namespace} to this"
                    f" server's token (404), which runs jobs in {self.namespace()}.",
                    fix=f"Follow it from a jobtrail server whose token runs jobs in {placement.namespace}.",
                    reason="auth_error",
                ) from exc
            raise _backend_error("read the job's status", exc) from exc
        stage = _stage_name(job)
        started = job.started_at.timestamp() if job.started_at else None
        if stage == "SCHEDULING":
            return Probe(phase="starting")
        if stage == "RUNNING":
            self._ensure_follower(placement)
            return Probe(phase="running", started_at=started)
        if stage == "DELETED":
            return Probe(phase="lost", started_at=started)
        if not self._copied(placement) and self._failed_copies.get(_remote(placement), 0) < COPY_FAILURES:
            # Ended, but what it printed is still being copied: "exited" means every event is here to be read, as
            # on the local backend, so the attempt is judged on its whole receipt.
            return Probe(phase="running", started_at=started)
        ended = job.finished_at.timestamp() if job.finished_at else time.time()
        return Probe(phase="exited", started_at=started, exit=_exit_record(stage, job.status.message, ended))

    def read_log(self, placement: Placement, offset: int = 0, max_lines: int | None = None) -> LogChunk:
        """Cursors are positions in all the job printed, as on the local backend (joblog.py)."""
        if offset < 0:
            raise InvalidRequestError(
                f"Log offset {offset} is negative.", fix="Pass 0, or the cursor a previous read returned."
            )
        return joblog.read(Path(placement.workdir), offset, max_lines, self._copied(placement))

    def read_events(self, placement: Placement, offset: int = 0) -> LogChunk:
        """The event lines from job.events, never capped (offsets are its bytes)."""
        return joblog.read_events(Path(placement.workdir), offset, self._copied(placement))

    def read_tail(self, placement: Placement, count: int) -> LogChunk:
        return joblog.tail(Path(placement.workdir), count, self._copied(placement))

    def cancel(self, placement: Placement) -> None:
        try:
            self.api().cancel_job(job_id=_remote(placement), namespace=placement.namespace)
        except Exception as exc:
            raise _backend_error("cancel the job", exc) from exc

    # --- helpers ------------------------------------------------------------------------

    def api(self) -> HfApi:
        if self._api is None:
            from huggingface_hub import HfApi  # imported on first use: the server starts without it

            self._api = HfApi(token=self._token)
        return self._api

    def namespace(self) -> str:
        """Where this server's jobs run and are billed: the namespace it was given (JOBTRAIL_HF_NAMESPACE: a user or
        an org), else the token's user."""
        if self._namespace is None:
            try:
                self._namespace = self.api().whoami()["name"]
            except Exception as exc:
                raise _backend_error("find out who the token belongs to", exc) from exc
        return self._namespace

    def _ensure_follower(self, placement: Placement) -> None:
        key = _remote(placement)
        with self._lock:
            running = self._followers.get(key)
            if running is not None and running.is_alive():
                return
            thread = threading.Thread(target=self._follow, args=(placement,), name=f"hf-logs-{key}", daemon=True)
            self._followers[key] = thread
            thread.start()

    def _copied(self, placement: Placement) -> bool:
        """Whether the whole log is copied; until it is, a follower keeps copying it."""
        done = (Path(placement.workdir) / COMPLETE).exists()
        if not done:
            self._ensure_follower(placement)
        return done

    def _follow(self, placement: Placement) -> None:
        """Copy the job's log lines exactly once each, across dropped streams and server processes (hf_logs.py)."""
        workdir = Path(placement.workdir)
        private_dir(workdir)
        with hf_logs.follower_lock(workdir) as mine:
            if not mine:
                return  # another server process copies it; a later read starts this one again if it stops
            if hf_logs.finished(workdir):  # copied whole by a process that stopped before marking it complete
                write_private(workdir / COMPLETE, "")
                return
            given = [self._token or "", *(os.environ.get(name, "") for name in placement.secret_sources)]
            redact = Redactor([*given, *credential_values(os.environ)])
            copy = hf_logs.StreamCopy(workdir, self.log_max_bytes, redact)
            if self._copy(placement, copy):
                copy.close()
                write_private(workdir / COMPLETE, "")
                return
            copy.abandon()
        with self._lock:
            key = _remote(placement)
            self._failed_copies[key] = self._failed_copies.get(key, 0) + 1

    def _copy(self, placement: Placement, copy: hf_logs.StreamCopy) -> bool:
        """Feed the copy until the job has ended and its log was read whole once more; False when the stream kept
        failing (FOLLOW_RETRIES times)."""
        api, job_id = self.api(), _remote(placement)
        for attempt in range(FOLLOW_RETRIES):
            try:
                copy.feed(api.fetch_job_logs(job_id=job_id, namespace=placement.namespace, follow=True))
                # The client ends a followed stream quietly when it drops after the job has
                # finished, so the end of a stream proves nothing: once the job is over, read
                # the whole log one last time.
                if self._stage(placement) in TERMINAL:
                    copy.feed(api.fetch_job_logs(job_id=job_id, namespace=placement.namespace, follow=False))
                    return True
            except Exception:  # noqa: BLE001 - a dropped stream or a hiccup: resume after what was copied
                pass
            time.sleep(min(0.2 * 2.0**attempt, 5.0))
        return False

    def _stage(self, placement: Placement) -> str:
        job = self.api().inspect_job(job_id=_remote(placement), namespace=placement.namespace)
        return _stage_name(job)


def _stage_name(job: JobInfo) -> str:
    stage = job.status.stage
    return str(getattr(stage, "value", stage))


def _exit_record(stage: str, message: str | None, ended: float) -> ExitRecord:
    text = message or ""
    if stage == "COMPLETED":
        return ExitRecord(exit_code=0, ended_at=ended, message=message)
    if stage == "CANCELED":
        return ExitRecord(cancelled=True, ended_at=ended, message=message)
    timed_out = "timed out" in text.lower() or "timeout" in text.lower()
    code = _exit_code(text)
    return ExitRecord(exit_code=code, timed_out=timed_out, ended_at=ended, message=message)


def _exit_code(message: str) -> int | None:
    found = re.search(r"exit code:?\s*(-?\d+)", message, re.I)
    return int(found.group(1)) if found else None


def _remote(placement: Placement) -> str:
    if not placement.remote_id:
        raise BackendError("This attempt has no HF Jobs id.", fix="It never reached HF Jobs; retry it.")
    return placement.remote_id


def _host(url: str) -> str:
    return urlparse(url).netloc or "huggingface.co"


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def pack_script(script: str) -> str:
    """The script as SCRIPT_VARIABLE carries it (COMMAND unpacks it): gzip (no timestamp: the same script
    packs the same), then base64."""
    return base64.b64encode(gzip.compress(script.encode(), mtime=0)).decode("ascii")


def unpack_script(packed: str) -> str:
    """The script a job's SCRIPT_VARIABLE carries, as COMMAND writes it to its file."""
    return gzip.decompress(base64.b64decode(packed)).decode()


def _backend_error(action: str, exc: BaseException) -> BackendError:
    status = _status(exc)
    if status == 401:
        return BackendError(
            f"HF Jobs refused to {action}: the token is invalid or expired (401).",
            fix="Create a token with write access at https://huggingface.co/settings/tokens and set HF_TOKEN.",
            reason="auth_error",
        )
    if status == 403:
        return BackendError(
            f"HF Jobs refused to {action}: this token may not run jobs here (403).",
            fix="Use a token with the 'job.write' permission (or a write token) for this namespace, "
            "and check that the account has Jobs enabled (a PRO or Team/Enterprise plan).",
            reason="auth_error",
        )
    first = str(exc).strip().splitlines()
    return BackendError(
        f"Could not {action} on HF Jobs: {type(exc).__name__}: {first[0] if first else ''}"[:400],
        fix="Check the network and https://status.huggingface.co, then retry.",
        reason="infra_transient",
    )
