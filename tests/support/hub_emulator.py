"""In-process emulator of the Hugging Face Hub and HF Jobs REST API, for offline tests.

The wire format follows what the installed huggingface_hub 2.4 client parses (its source is the
reference: `hf_api.py`, `_jobs_api.py`, `file_download.py`, `_commit_api.py`, `utils/_http.py`),
so tests exercise the real `HfApi` code against it. Jobs are executed for real, as local
subprocesses.

Pointing the client at the emulator
-----------------------------------
`huggingface_hub.constants` reads `HF_ENDPOINT` once, at import time
(`ENDPOINT = os.getenv("HF_ENDPOINT", "https://huggingface.co")`, and derives
`HUGGINGFACE_CO_URL_TEMPLATE`, `HF_URL_HOSTS` and the redirect allow-list from it). Setting
`os.environ["HF_ENDPOINT"]` after `huggingface_hub` was imported is NOT honoured. `HfApi()` and the
module-level helpers read `constants.ENDPOINT` when called, so in-process code must either
- pass the endpoint explicitly: `HfApi(endpoint=hub.url)`, `hf_hub_download(..., endpoint=hub.url)`;
- or run under `hub.patch_default_endpoint()` (the `hub` fixture does), which rewrites
  `constants.ENDPOINT` / `constants.HUGGINGFACE_CO_URL_TEMPLATE` and sets `HF_ENDPOINT` for
  subprocesses. `HF_URL_HOSTS` stays frozen; it only matters for redirects, which the emulator
  never sends.
Processes started later (including the jobs the emulator runs, which get `HF_ENDPOINT` in their
environment) pick the emulator up through the environment variable as usual.
`HfApi.list_jobs()` without `namespace=` calls the module-level `whoami()`: always pass `namespace=`.

Endpoints (all under `hub.url`)
-------------------------------
- `GET  /api/whoami-v2`: user, orgs and token role; 401 + `X-Error-Message: Invalid credentials in
  Authorization header` for a bad or missing token (any request carrying an unknown token gets it).
- `GET  /api/agent-harnesses`, `HEAD|GET|POST /api/telemetry/...`, `POST /api/validate-yaml`:
  harmless answers to the client's and trl's side calls.
- `GET  /api/{models|datasets}/{repo}[/revision/{rev}]`: model_info / dataset_info (`expand`,
  `blobs`); model `config` and `safetensors` parameter counts are derived from the files.
- `GET  /api/spaces/{repo}`: space_info of a Space seeded with `add_repo(..., repo_type="space")` (its
  `info` gives tags, sdk ...); nothing runs in it, and Spaces cannot be created through the API.
- `GET  /api/{models|datasets}/{repo}/auth-check[/write]`: gated → `X-Error-Code: GatedRepo`.
- `GET  /api/{models|datasets}/{repo}/tree/{rev}[/{path}]`: list_repo_tree / list_repo_files,
  paginated with a `Link: <...>; rel="next"` header.
- `POST /api/{models|datasets}/{repo}/paths-info/{rev}` (form), `/preupload/{rev}` (JSON) and
  `/commit/{rev}` (ndjson): get_paths_info, upload_file, upload_folder, create_commit.
- `POST /api/repos/create`: 409 with `url` when it exists, 403 without write access.
- `HEAD|GET /[datasets/]{repo}/resolve/{rev}/{path}`: hf_hub_download (X-Repo-Commit, ETag,
  Content-Length, single `Range`).
- `GET  /api/jobs/hardware`; `POST|GET /api/jobs/{ns}` (create; list with `stage`, `label=k=v`,
  pagination); `GET /api/jobs/{ns}/{id}`; `POST /api/jobs/{ns}/{id}/cancel` and `/duplicate` (rerun);
  `GET /api/jobs/{ns}/{id}/logs[?tail=N]` (Server-Sent Events, chunked).
Errors carry `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) and
`X-Error-Message`, which is what the client turns into its typed exceptions.

Private repos answer RepoNotFound (401 without a token, 404 with one) to anyone outside their
namespace; gated repos show metadata and file lists to everyone but refuse downloads and
`auth_check` until `grant_access`.

Jobs
----
A submitted job waits `scheduling_delay` seconds in SCHEDULING, then its `command + arguments` run
as a subprocess (own process group, cwd and HOME in a per-job temp dir) with: the emulator's shim
directory and the venv first on PATH, `HF_ENDPOINT` = the emulator, OMP_NUM_THREADS=1, the `job_env` given to
the emulator, the job's environment and its secrets' values. The shim `uv` handles
`uv run [options] TARGET [ARGS]` by running TARGET with the venv's python (never the real uv: no
network); a TARGET URL is fetched from the emulator's own repos without a token, as uv would (an
`https://huggingface.co/...` URL is mapped onto the emulator). So `["uv", "run", url]`,
`["python", "-c", code]` and `["bash", "-c", 'printf %s "$JOBTRAIL_SCRIPT" > s.py && uv run s.py']`
all work. stdout+stderr lines become log events; the log opens with "===== Job started at ... ====="
and ends with "===== Job finished: status=STAGE =====". Exit 0 → COMPLETED, else ERROR
("Job failed with exit code: N"); past `timeoutSeconds` (default 1800, like the service) → ERROR
("Job timed out: ..."); cancel → SIGTERM to the process group, SIGKILL after `kill_grace` → CANCELED.

Log stream semantics (what the client relies on): history is replayed, then new lines stream while
the job runs, with `: keep-alive` comments (one at the start, then every `keepalive_interval`), and
the stream ends once the job is terminal. Nothing is sent while SCHEDULING. A non-follow client stops
at the first event after the response's `Date` + 1 s, or after its 5 s read timeout when a running
job is silent. After a dropped stream the client (follow=True) asks for the job's stage first and
reconnects only while the job is not terminal: a drop near the end loses the remaining lines.

Test hooks: `hub.inject` (see `FaultInjector`), `hub.requests` ((method, raw path) of every request),
`hub.errors` (tracebacks of emulator bugs; the `hub` fixture asserts it is empty), `hub.jobs`,
`hub.repos`, `hub.repo_files(...)`.

Known deviations from the real Hub: every file is a regular git blob (no LFS/Xet, no CDN redirect,
binary files accepted in commits); branches are only what `add_repo`/`create_branch` made and
commits append to them (no PRs, tags, `parentCommit` checks, deletion of repos); revisions are a
branch name or a full commit sha; `create_repo` ignores Space arguments; `run_uv_job` with a LOCAL
script needs the buckets API and is not supported (use a URL or bash + env var); volumes, ports,
SSH, network groups, attempts and scheduled jobs are accepted but ignored (no scheduled-job or
metrics endpoints); the docker image is ignored (everything runs in the current venv, so
dependencies are not installed or checked); `PYTHONUNBUFFERED` is not set, exactly as in a real
container, so pass it in `env` (or flush) to see output before exit; status messages for ERROR and
timeout are worded by the emulator; secrets come back as `{name: None}`; job lists are newest first;
log event timestamps carry microseconds.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

import pytest

INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
TERMINAL_STAGES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})
DEFAULT_JOB_TIMEOUT_S = 30 * 60  # the service's default when timeoutSeconds is absent
REPO_ACTIONS = frozenset({"revision", "auth-check", "tree", "paths-info", "preupload", "commit"})
ROLES = frozenset({"write", "read", "fineGrained"})
FINE_GRAINED_DEFAULT = ("repo.content.read", "job.write")  # can run jobs, cannot push

# name, pretty name, vCPU, RAM GB, accelerator (model, count, VRAM GB per unit) or None, $/hour.
# Prices are HF Jobs' published price table; CPU/RAM figures are the public spec sheet's.
_HARDWARE: tuple[tuple[str, str, int, int, tuple[str, int, int] | None, float], ...] = (
    ("cpu-basic", "CPU Basic", 2, 16, None, 0.01),
    ("cpu-upgrade", "CPU Upgrade", 8, 32, None, 0.03),
    ("t4-small", "Nvidia T4 - small", 4, 15, ("T4", 1, 16), 0.40),
    ("t4-medium", "Nvidia T4 - medium", 8, 30, ("T4", 1, 16), 0.60),
    ("l4x1", "1x Nvidia L4", 8, 30, ("L4", 1, 24), 0.80),
    ("l4x4", "4x Nvidia L4", 48, 186, ("L4", 4, 24), 3.80),
    ("l40sx1", "1x Nvidia L40S", 8, 62, ("L40S", 1, 48), 1.80),
    ("l40sx4", "4x Nvidia L40S", 48, 382, ("L40S", 4, 48), 8.30),
    ("l40sx8", "8x Nvidia L40S", 192, 1534, ("L40S", 8, 48), 23.50),
    ("a10g-small", "Nvidia A10G - small", 4, 15, ("A10G", 1, 24), 1.00),
    ("a10g-large", "Nvidia A10G - large", 12, 46, ("A10G", 1, 24), 1.50),
    ("a10g-largex2", "2x Nvidia A10G - large", 24, 92, ("A10G", 2, 24), 3.00),
    ("a10g-largex4", "4x Nvidia A10G - large", 48, 184, ("A10G", 4, 24), 5.00),
    ("a100-large", "Nvidia A100 - large", 12, 142, ("A100", 1, 80), 2.50),
    ("a100x4", "4x Nvidia A100", 48, 568, ("A100", 4, 80), 10.00),
    ("a100x8", "8x Nvidia A100", 96, 1136, ("A100", 8, 80), 20.00),
    ("h200", "Nvidia H200", 23, 256, ("H200", 1, 141), 5.00),
    ("h200x2", "2x Nvidia H200", 46, 512, ("H200", 2, 141), 10.00),
    ("h200x4", "4x Nvidia H200", 92, 1024, ("H200", 4, 141), 20.00),
    ("h200x8", "8x Nvidia H200", 184, 2048, ("H200", 8, 141), 40.00),
    ("rtx-pro-6000", "Nvidia RTX PRO 6000", 23, 128, ("RTX PRO 6000", 1, 96), 2.75),
    ("rtx-pro-6000x2", "2x Nvidia RTX PRO 6000", 46, 256, ("RTX PRO 6000", 2, 96), 5.50),
    ("rtx-pro-6000x4", "4x Nvidia RTX PRO 6000", 92, 512, ("RTX PRO 6000", 4, 96), 11.00),
    ("rtx-pro-6000x8", "8x Nvidia RTX PRO 6000", 184, 1024, ("RTX PRO 6000", 8, 96), 22.00),
)
# Flavors the service accepts (huggingface_hub's JobHardware enum) even where no price is listed.
_EXTRA_FLAVORS = frozenset({"cpu-performance", "cpu-xl"})

# `uv run` options that consume the next argument (the shim skips them to find the target).
_UV_VALUE_OPTIONS = [
    "--with",
    "--with-editable",
    "--with-requirements",
    "-w",
    "-p",
    "--python",
    "--index",
    "--default-index",
    "--index-url",
    "-i",
    "--extra-index-url",
    "--find-links",
    "-f",
    "--env-file",
    "--directory",
    "--project",
    "--group",
    "--extra",
    "--only-group",
    "--no-group",
    "--config-file",
    "--cache-dir",
    "--python-preference",
    "--prerelease",
    "--resolution",
    "--index-strategy",
    "--keyring-provider",
    "--exclude-newer",
    "--link-mode",
]

_UV_SHIM = '''"""Stand-in for `uv` inside emulated jobs: `uv run [options] TARGET [ARGS...]` with this Python."""
import os, sys, tempfile, urllib.error, urllib.parse, urllib.request

VALUE_OPTIONS = set(%(options)r)


def split_run_args(args):
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--":
            i += 1
            break
        i += 2 if args[i] in VALUE_OPTIONS else 1
    if i >= len(args):
        sys.stderr.write("error: `uv run` needs a script or command\\n")
        sys.exit(2)
    return args[i], args[i + 1:]


def fetch(url):
    # uv downloads a script URL without any Hub token; huggingface.co URLs are served by the emulator.
    parts = urllib.parse.urlsplit(url)
    if parts.hostname in ("huggingface.co", "hf.co"):
        url = os.environ["HF_ENDPOINT"].rstrip("/") + parts.path + ("?" + parts.query if parts.query else "")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            content = response.read()
    except (urllib.error.URLError, OSError) as exc:
        sys.stderr.write("error: Failed to fetch: `%%s`\\n  Caused by: %%s\\n" %% (url, exc))
        sys.exit(2)
    name = os.path.basename(parts.path) or "script.py"
    path = os.path.join(tempfile.mkdtemp(prefix="uv-script-"), name)
    with open(path, "wb") as f:
        f.write(content)
    return path


def main(argv):
    if not argv or argv[0] != "run":
        sys.stderr.write("error: the Hub emulator's uv only supports `uv run`\\n")
        return 2
    target, args = split_run_args(argv[1:])
    if target.startswith(("http://", "https://")):
        target = fetch(target)
    if target.endswith(".py") or os.path.isfile(target):
        os.execv(sys.executable, [sys.executable, target, *args])
    try:
        os.execvp(target, [target, *args])
    except OSError as exc:
        sys.stderr.write("error: Failed to spawn: `%%s`\\n  Caused by: %%s\\n" %% (target, exc))
        return 2


sys.exit(main(sys.argv[1:]))
'''


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime, *, micro: bool = False) -> str:
    """The Hub's timestamp format: milliseconds, or microseconds for log events.

    Finer log timestamps matter: after a dropped `tail` stream the client skips replayed events
    by timestamp, so equal timestamps on different lines would be ambiguous.
    """
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _entity_id(name: str) -> str:
    """A stable 24-hex id (the Hub's ids are Mongo ObjectIds)."""
    return hashlib.sha1(f"entity:{name}".encode()).hexdigest()[:24]


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _to_bytes(content: bytes | str | Path) -> bytes:
    if isinstance(content, Path):
        return content.read_bytes()
    return content.encode() if isinstance(content, str) else content


# ---------------------------------------------------------------------------------------------
# State


@dataclass(frozen=True)
class TokenInfo:
    token: str
    user: str
    role: str
    orgs: tuple[str, ...] = ()
    permissions: tuple[str, ...] = ()

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.user, *self.orgs)

    def can(self, permission: str) -> bool:
        """Write-role tokens can do anything; fine-grained ones only what they list."""
        if self.role == "write":
            return True
        if self.role == "fineGrained":
            return permission in self.permissions
        return permission == "repo.content.read"


@dataclass
class Commit:
    sha: str
    title: str
    date: datetime
    files: dict[str, bytes]


@dataclass
class Repo:
    repo_id: str
    repo_type: str
    owner: str
    private: bool
    gated: str | bool
    info: dict[str, Any]
    created_at: datetime
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    granted: set[str] = field(default_factory=set)

    def resolve(self, revision: str) -> Commit | None:
        sha = self.branches.get(revision, revision)
        return self.commits.get(sha)

    @property
    def head(self) -> Commit:
        return self.commits[self.branches["main"]]

    @property
    def url_path(self) -> str:
        return self.repo_id if self.repo_type == "model" else f"{self.repo_type}s/{self.repo_id}"


@dataclass
class LogEvent:
    timestamp: str
    data: str

    def sse(self) -> bytes:
        return b"data: " + json.dumps({"timestamp": self.timestamp, "data": self.data}).encode() + b"\n\n"


@dataclass
class EmulatedJob:
    """A submitted job. Read its fields in tests; the emulator mutates them under its lock."""

    id: str
    namespace: str
    owner_type: str
    initiator: str
    spec: dict[str, Any]  # the submitted body, with secret values replaced by None
    secret_values: dict[str, str] = field(repr=False)
    workdir: Path
    stage: str = "SCHEDULING"
    message: str | None = None
    created_at: datetime = field(default_factory=_now)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    events: list[LogEvent] = field(default_factory=list)
    pid: int | None = None
    kill_reason: str | None = None
    wake: threading.Event = field(default_factory=threading.Event, repr=False)
    escalation: threading.Timer | None = field(default=None, repr=False)

    @property
    def argv(self) -> list[str]:
        return [*self.spec["command"], *self.spec.get("arguments", [])]

    @property
    def timeout_s(self) -> int:
        return int(self.spec.get("timeoutSeconds") or DEFAULT_JOB_TIMEOUT_S)

    @property
    def logs(self) -> list[str]:
        return [event.data for event in self.events]


@dataclass
class _FailRule:
    pattern: re.Pattern[str]
    status: int
    remaining: int | None
    method: str | None
    message: str
    error_code: str | None


class FaultInjector:
    """Faults the next requests will meet. `times=None` means every time until `clear()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[_FailRule] = []
        self._log_drop: tuple[int, int | None] | None = None  # (after N lines, remaining times)
        self.job_hf_token: str | None = None

    def fail(
        self,
        path_pattern: str,
        status: int = 503,
        *,
        times: int | None = 1,
        method: str | None = None,
        message: str = "Injected fault",
        error_code: str | None = None,
    ) -> None:
        """Answer `status` to requests whose raw path (no query) matches `path_pattern` (re.search)."""
        rule = _FailRule(re.compile(path_pattern), status, times, method, message, error_code)
        with self._lock:
            self._failures.append(rule)

    def jobs_auth_error(self, status: int = 401, *, times: int | None = None) -> None:
        """Force 401 (bad credentials) or 403 (no rights) on every /api/jobs endpoint."""
        message = INVALID_CREDENTIALS if status == 401 else "You don't have the rights to run Jobs in this namespace"
        self.fail(r"^/api/jobs(/|$)", status, times=times, message=message)

    def drop_logs_after(self, lines: int, *, times: int | None = 1) -> None:
        """Cut log streams abruptly (no final chunk) once `lines` data lines were sent on them."""
        with self._lock:
            self._log_drop = (lines, times)

    def replace_job_hf_token(self, token: str | None) -> None:
        """Give jobs this HF_TOKEN instead of the one submitted (a limited session token)."""
        self.job_hf_token = token

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self._log_drop = None
        self.job_hf_token = None

    def take_failure(self, method: str, path: str) -> _FailRule | None:
        with self._lock:
            for rule in self._failures:
                if (rule.method in (None, method)) and rule.pattern.search(path):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                        if rule.remaining <= 0:
                            self._failures.remove(rule)
                    return rule
        return None

    def log_drop_threshold(self) -> int | None:
        with self._lock:
            return self._log_drop[0] if self._log_drop else None

    def consume_log_drop(self) -> None:
        with self._lock:
            if self._log_drop and self._log_drop[1] is not None:
                lines, remaining = self._log_drop
                self._log_drop = (lines, remaining - 1) if remaining > 1 else None


# ---------------------------------------------------------------------------------------------
# The emulator


class HubEmulator:
    """Hub + Jobs emulator on 127.0.0.1 (a free port), served from a background thread."""

    def __init__(
        self,
        *,
        scheduling_delay: float = 0.2,
        page_size: int = 50,
        tree_page_size: int = 1000,
        keepalive_interval: float = 15.0,
        kill_grace: float = 1.0,
        job_env: Mapping[str, str] | None = None,
    ) -> None:
        self.scheduling_delay = scheduling_delay
        self.page_size = page_size  # jobs per page of GET /api/jobs/{ns}
        self.tree_page_size = tree_page_size  # entries per page of a tree listing
        # Longer than the client's 5 s non-follow read timeout, so a silent running job ends it.
        self.keepalive_interval = keepalive_interval
        self.kill_grace = kill_grace
        self.job_env = dict(job_env or {})
        self.inject = FaultInjector()
        self.hardware: list[dict[str, Any]] = [_hardware_json(*row) for row in _HARDWARE]
        self.requests: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.tokens: dict[str, TokenInfo] = {}
        self.repos: dict[tuple[str, str], Repo] = {}
        self.jobs: dict[str, EmulatedJob] = {}
        self.cond = threading.Condition()  # guards repos, jobs and job events
        self.stopping = threading.Event()
        self._commit_counter = itertools.count()
        self._job_counter = itertools.count()
        self._connections: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._root = Path(tempfile.mkdtemp(prefix="hub-emulator-"))
        self._shim_dir = self._write_shims(self._root / "bin")
        self._server = _Server(("127.0.0.1", 0), _Handler, self)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll interval: shutdown() waits up to one interval.
        self._serve_thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="hub-emulator", daemon=True
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> HubEmulator:
        self._serve_thread.start()
        return self

    def close(self) -> None:
        """Stop serving, kill running jobs, drop open connections and delete the temp dir."""
        self.stopping.set()
        with self.cond:
            jobs = list(self.jobs.values())
            self.cond.notify_all()
        for job in jobs:
            self._kill(job, "shutdown")
        for thread in self._threads:
            thread.join(timeout=self.kill_grace + 5)
        if self._serve_thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> HubEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def patch_default_endpoint(self) -> Iterator[None]:
        """Make `HfApi()` and module-level helpers default to the emulator (see module docstring)."""
        from huggingface_hub import constants

        saved = (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, os.environ.get("HF_ENDPOINT"))
        constants.ENDPOINT = self.url
        constants.HUGGINGFACE_CO_URL_TEMPLATE = self.url + "/{repo_id}/resolve/{revision}/{filename}"
        os.environ["HF_ENDPOINT"] = self.url
        try:
            yield
        finally:
            constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE = saved[0], saved[1]
            if saved[2] is None:
                os.environ.pop("HF_ENDPOINT", None)
            else:
                os.environ["HF_ENDPOINT"] = saved[2]

    # -- seeding -----------------------------------------------------------------------------

    def add_token(
        self,
        token: str,
        user: str,
        role: str = "write",
        *,
        orgs: Sequence[str] = (),
        permissions: Sequence[str] | None = None,
    ) -> TokenInfo:
        """Register `token` for `user` (member, with write rights, of `orgs`).

        role: "write", "read" or "fineGrained"; a fine-grained token holds `permissions`
        (default: repo.content.read + job.write: it can run jobs but not push or create repos).
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}")
        perms = tuple(permissions if permissions is not None else FINE_GRAINED_DEFAULT) if role == "fineGrained" else ()
        info = TokenInfo(token, user, role, tuple(orgs), perms)
        self.tokens[token] = info
        return info

    def add_repo(
        self,
        repo_id: str,
        *,
        repo_type: str = "model",
        files: Mapping[str, bytes | str | Path] | None = None,
        private: bool = False,
        gated: str | bool = False,
        owner: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> str:
        """Create a repo with one commit on `main` holding `files`; returns the commit sha.

        files: path in repo → bytes, text, or a local Path read now. gated: False, "auto" or
        "manual". info: extra model_info/dataset_info fields (tags, library_name, cardData...).
        """
        if repo_type not in ("model", "dataset", "space"):
            raise ValueError("repo_type must be 'model', 'dataset' or 'space'")
        repo = Repo(
            repo_id=repo_id,
            repo_type=repo_type,
            owner=owner or repo_id.split("/")[0],
            private=private,
            gated=gated,
            info=dict(info or {}),
            created_at=_now(),
        )
        contents = {path: _to_bytes(content) for path, content in (files or {}).items()}
        with self.cond:
            self.repos[(repo_type, repo_id)] = repo
            return self._commit(repo, "main", contents, "initial commit")

    def create_branch(self, repo_id: str, branch: str, *, repo_type: str = "model", revision: str = "main") -> None:
        repo = self.repos[(repo_type, repo_id)]
        commit = repo.resolve(revision)
        if commit is None:
            raise KeyError(revision)
        with self.cond:
            repo.branches[branch] = commit.sha

    def grant_access(self, repo_id: str, user: str, *, repo_type: str = "model") -> None:
        """Accept `user`'s access request to a gated repo."""
        with self.cond:
            self.repos[(repo_type, repo_id)].granted.add(user)

    def repo_files(self, repo_id: str, *, repo_type: str = "model", revision: str = "main") -> dict[str, bytes]:
        with self.cond:
            commit = self.repos[(repo_type, repo_id)].resolve(revision)
            if commit is None:
                raise KeyError(revision)
            return dict(commit.files)

    def repo_history(self, repo_id: str, *, repo_type: str = "model") -> list[dict[str, bytes]]:
        """The files of every commit of the repo, oldest first."""
        with self.cond:
            return [dict(commit.files) for commit in self.repos[(repo_type, repo_id)].commits.values()]

    # -- internals used by the handler -------------------------------------------------------

    def track(self, conn: socket.socket, *, add: bool) -> None:
        if add:
            self._connections.add(conn)
        else:
            self._connections.discard(conn)

    def _commit(self, repo: Repo, branch: str, files: dict[str, bytes], title: str) -> str:
        """Append a commit (caller holds the lock); returns its sha."""
        digest = hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}:{next(self._commit_counter)}:{title}".encode())
        for path in sorted(files):
            digest.update(f"{path}:{_git_blob_oid(files[path])}".encode())
        commit = Commit(sha=digest.hexdigest(), title=title, date=_now(), files=files)
        repo.commits[commit.sha] = commit
        repo.branches[branch] = commit.sha
        return commit.sha

    def commit_files(self, repo: Repo, branch: str, changes: Sequence[tuple[str, str, bytes]], title: str) -> str:
        """Apply ("add"|"delete"|"delete_folder", path, content) changes on top of `branch`."""
        with self.cond:
            files = dict(repo.resolve(branch).files)  # type: ignore[union-attr]  # caller checked
            for action, path, content in changes:
                if action == "add":
                    files[path] = content
                elif action == "delete":
                    files.pop(path, None)
                else:
                    files = {p: c for p, c in files.items() if not p.startswith(path.rstrip("/") + "/")}
            return self._commit(repo, branch, files, title)

    def submit_job(
        self, namespace: str, owner_type: str, initiator: str, spec: dict[str, Any], secrets: dict[str, str]
    ) -> EmulatedJob:
        # ObjectId-like: a timestamp prefix keeps ids sortable by creation.
        job_id = f"{int(_now().timestamp()):08x}{next(self._job_counter):04x}{os.urandom(6).hex()}"
        workdir = self._root / "jobs" / job_id
        for sub in ("home", "tmp"):
            (workdir / sub).mkdir(parents=True)
        job = EmulatedJob(job_id, namespace, owner_type, initiator, spec, secrets, workdir)
        thread = threading.Thread(target=self._run_job, args=(job,), name=f"job-{job_id}", daemon=True)
        with self.cond:
            self.jobs[job_id] = job
            self._threads.append(thread)
        thread.start()
        return job

    def cancel_job(self, job: EmulatedJob) -> None:
        self._kill(job, "cancel")

    def _run_job(self, job: EmulatedJob) -> None:
        if job.wake.wait(self.scheduling_delay):  # canceled (or emulator closing) while SCHEDULING
            self._finish(job, "CANCELED", None)
            return
        try:
            proc = subprocess.Popen(
                job.argv,
                cwd=job.workdir,
                env=self._job_environment(job),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so cancel/timeout kill every child
            )
        except OSError as exc:
            self._finish(job, "ERROR", f"Job failed to start: {exc}")
            return
        with self.cond:
            job.pid, job.stage, job.started_at = proc.pid, "RUNNING", _now()
            self._append_event(job, f"===== Job started at {job.started_at:%Y-%m-%d %H:%M:%S} =====")
            killed_early = job.kill_reason is not None
        if killed_early:  # canceled between the end of SCHEDULING and the process start
            self._terminate(job)
        timer = threading.Timer(job.timeout_s, self._kill, (job, "timeout"))
        timer.daemon = True
        timer.start()
        assert proc.stdout is not None
        for raw in proc.stdout:
            self.log_line(job, raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r"))
        returncode = proc.wait()
        timer.cancel()
        if job.escalation is not None:
            job.escalation.cancel()  # the group is gone: never signal a recycled pid
        self._finish(job, *self._outcome(job, returncode))

    def _job_environment(self, job: EmulatedJob) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        env = {
            "PATH": os.pathsep.join([str(self._shim_dir), venv_bin, os.environ.get("PATH", os.defpath)]),
            "HOME": str(job.workdir / "home"),
            "TMPDIR": str(job.workdir / "tmp"),
            "LANG": "C.UTF-8",
            "HF_ENDPOINT": self.url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "OMP_NUM_THREADS": "1",  # one torch thread: the emulated machine's cores are the test machine's
        }
        env.update(self.job_env)
        env.update({key: str(value) for key, value in job.spec.get("environment", {}).items()})
        env.update(job.secret_values)
        if self.inject.job_hf_token is not None and "HF_TOKEN" in job.secret_values:
            env["HF_TOKEN"] = self.inject.job_hf_token
        return env

    def _outcome(self, job: EmulatedJob, returncode: int) -> tuple[str, str | None]:
        if job.kill_reason == "cancel":
            return "CANCELED", None
        if job.kill_reason == "shutdown":
            return "CANCELED", "Hub emulator shut down"
        if job.kill_reason == "timeout":
            return "ERROR", f"Job timed out: it ran longer than its timeout of {job.timeout_s}s"
        if returncode == 0:
            return "COMPLETED", None
        # A container reports death by signal N as exit code 128 + N.
        code = 128 - returncode if returncode < 0 else returncode
        return "ERROR", f"Job failed with exit code: {code}"

    def _kill(self, job: EmulatedJob, reason: str) -> None:
        with self.cond:
            if job.stage in TERMINAL_STAGES or job.kill_reason is not None:
                return
            job.kill_reason = reason
            job.wake.set()
            started = job.pid is not None
        if started:
            self._terminate(job)

    def _terminate(self, job: EmulatedJob) -> None:
        """SIGTERM the job's process group (as a container stop does), SIGKILL after kill_grace."""
        assert job.pid is not None
        self._signal_group(job.pid, signal.SIGTERM)
        job.escalation = threading.Timer(self.kill_grace, self._signal_group, (job.pid, signal.SIGKILL))
        job.escalation.daemon = True
        job.escalation.start()

    @staticmethod
    def _signal_group(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def log_line(self, job: EmulatedJob, text: str) -> None:
        with self.cond:
            self._append_event(job, text)

    def _append_event(self, job: EmulatedJob, text: str) -> None:
        job.events.append(LogEvent(_iso(_now(), micro=True), text))
        self.cond.notify_all()

    def _finish(self, job: EmulatedJob, stage: str, message: str | None) -> None:
        with self.cond:
            if job.started_at is not None:
                self._append_event(job, f"===== Job finished: status={stage} =====")
            job.stage, job.message, job.finished_at = stage, message, _now()
            self.cond.notify_all()

    @staticmethod
    def _write_shims(bin_dir: Path) -> Path:
        bin_dir.mkdir(parents=True)
        shim = bin_dir / "uv_shim.py"
        shim.write_text(_UV_SHIM % {"options": _UV_VALUE_OPTIONS})
        # A /bin/sh wrapper rather than a shebang: shebang lines are length-limited.
        wrapper = bin_dir / "uv"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{shim}" "$@"\n')
        wrapper.chmod(0o755)
        return bin_dir


def _hardware_json(
    name: str, pretty: str, cpu: int, ram: int, gpu: tuple[str, int, int] | None, per_hour: float
) -> dict[str, Any]:
    """One entry of GET /api/jobs/hardware: billed per minute, in micro-dollars and dollars."""
    micro = round(per_hour / 60 * 1_000_000)
    entry: dict[str, Any] = {
        "name": name,
        "prettyName": pretty,
        "cpu": f"{cpu} vCPU",
        "ram": f"{ram} GB",
        "ephemeralStorage": "20 GB" if gpu is None else "100 GB",
        "unitCostMicroUSD": micro,
        "unitCostUSD": micro / 1_000_000,
        "unitLabel": "minute",
    }
    if gpu is not None:
        model, count, vram = gpu
        entry["accelerator"] = {
            "type": "gpu",
            "model": model,
            "quantity": str(count),
            "vram": f"{count * vram} GB",
            "manufacturer": "Nvidia",
        }
    return entry


# ---------------------------------------------------------------------------------------------
# Repo metadata helpers


def _dir_oid(path: str, files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha1(f"tree:{path}".encode())
    for child in sorted(p for p in files if p.startswith(path + "/")):
        digest.update(_git_blob_oid(files[child]).encode())
    return digest.hexdigest()


def _file_entry(path: str, data: bytes) -> dict[str, Any]:
    return {"type": "file", "oid": _git_blob_oid(data), "size": len(data), "path": path}


def _dir_entry(path: str, files: Mapping[str, bytes]) -> dict[str, Any]:
    return {"type": "directory", "oid": _dir_oid(path, files), "size": 0, "path": path}


def _directories(files: Mapping[str, bytes]) -> set[str]:
    return {"/".join(parts[:i]) for parts in (p.split("/") for p in files) for i in range(1, len(parts))}


def _tree(files: Mapping[str, bytes], base: str, recursive: bool) -> list[dict[str, Any]] | None:
    """Entries under `base` (direct children, or all descendants); None if `base` is no folder."""
    dirs = _directories(files)
    if base and base not in dirs:
        return None
    prefix = f"{base}/" if base else ""
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in files if p.startswith(prefix)):
        parts = path[len(prefix) :].split("/")
        if recursive:
            entries[path] = _file_entry(path, files[path])
            for i in range(1, len(parts)):
                folder = prefix + "/".join(parts[:i])
                entries[folder] = _dir_entry(folder, files)
        elif len(parts) == 1:
            entries[path] = _file_entry(path, files[path])
        else:
            entries[prefix + parts[0]] = _dir_entry(prefix + parts[0], files)
    return [entries[path] for path in sorted(entries)]


def _safetensors_counts(files: Mapping[str, bytes]) -> dict[str, Any] | None:
    """Parameter counts per dtype from the safetensors headers, as model_info's `safetensors`."""
    counts: dict[str, int] = {}
    for path, data in files.items():
        if not path.endswith(".safetensors") or len(data) < 8:
            continue
        (length,) = struct.unpack("<Q", data[:8])
        try:
            header = json.loads(data[8 : 8 + length])
        except ValueError:
            continue
        for name, tensor in header.items():
            if name != "__metadata__":
                size = 1
                for dim in tensor["shape"]:
                    size *= dim
                counts[tensor["dtype"]] = counts.get(tensor["dtype"], 0) + size
    return {"parameters": counts, "total": sum(counts.values())} if counts else None


def _model_config(files: Mapping[str, bytes]) -> dict[str, Any] | None:
    """The subset of config.json / tokenizer_config.json the Hub exposes in model_info.config."""
    config: dict[str, Any] = {}
    with contextlib.suppress(KeyError, ValueError):
        raw = json.loads(files["config.json"])
        config.update({key: raw[key] for key in ("architectures", "model_type") if key in raw})
    with contextlib.suppress(KeyError, ValueError):
        raw = json.loads(files["tokenizer_config.json"])
        keys = ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template")
        config["tokenizer_config"] = {key: raw[key] for key in keys if key in raw}
    return config or None


def _repo_info_json(repo: Repo, commit: Commit, blobs: bool) -> dict[str, Any]:
    siblings = []
    for path in sorted(commit.files):
        sibling: dict[str, Any] = {"rfilename": path}
        if blobs:
            sibling.update(size=len(commit.files[path]), blobId=_git_blob_oid(commit.files[path]))
        siblings.append(sibling)
    data: dict[str, Any] = {
        "_id": _entity_id(f"{repo.repo_type}/{repo.repo_id}"),
        "id": repo.repo_id,
        "author": repo.owner,
        "sha": commit.sha,
        "createdAt": _iso(repo.created_at),
        "lastModified": _iso(commit.date),
        "private": repo.private,
        "gated": repo.gated,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": siblings,
        "usedStorage": sum(len(data) for data in commit.files.values()),
    }
    if repo.repo_type == "model":
        if (config := _model_config(commit.files)) is not None:
            data["config"] = config
        if (safetensors := _safetensors_counts(commit.files)) is not None:
            data["safetensors"] = safetensors
    data.update(repo.info)
    return data


# ---------------------------------------------------------------------------------------------
# HTTP


class _Disconnected(Exception):
    """The client went away mid-response."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # snapshot_download opens several connections at once

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], emulator: HubEmulator) -> None:
        self.emulator = emulator
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked SSE, as the client expects
    server: _Server

    # -- plumbing ----------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.hub = self.server.emulator
        self.hub.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.hub.track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests read `hub.requests` instead of stderr noise."""

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def _dispatch(self) -> None:
        raw_path, _, query = self.path.partition("?")
        self.raw_path = raw_path
        self.params = parse_qsl(query, keep_blank_values=True)
        self.body = self._read_body()
        self.hub.requests.append((self.command, raw_path))
        try:
            if (rule := self.hub.inject.take_failure(self.command, raw_path)) is not None:
                self._error(rule.status, rule.message, code=rule.error_code)
            elif self._authenticate():
                self._route()
        except _Disconnected:
            self.close_connection = True
        except Exception:  # noqa: BLE001 - an emulator bug: report it to the test and answer 500
            self.hub.errors.append(traceback.format_exc())
            with contextlib.suppress(_Disconnected):
                self._error(500, "Hub emulator error")

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _authenticate(self) -> bool:
        """Resolve the bearer token; an unknown one is refused everywhere, as the Hub does."""
        header = self.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None
        self.token = self.hub.tokens.get(token) if token else None
        if token and self.token is None:
            self._error(401, INVALID_CREDENTIALS)
            return False
        return True

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError as exc:  # broken pipe, reset: the client is gone
            raise _Disconnected from exc

    def _send(
        self, status: int, body: bytes, headers: Mapping[str, str] | None = None, content_type: str = "application/json"
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
        except OSError as exc:
            raise _Disconnected from exc
        if self.command != "HEAD":
            self._write(body)

    def _json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _error(
        self, status: int, message: str, *, code: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        extra = {"X-Error-Message": message, **(headers or {})}
        if code:
            extra["X-Error-Code"] = code
        self._json(status, {"error": message}, extra)

    def _param(self, name: str) -> str | None:
        return next((value for key, value in self.params if key == name), None)

    def _flag(self, name: str) -> bool:
        return (self._param(name) or "").lower() in ("1", "true")

    def _require_token(self) -> TokenInfo | None:
        if self.token is None:
            self._error(401, INVALID_CREDENTIALS)
        return self.token

    def _next_link(self, path: str, offset: int, total: int, page: int) -> dict[str, str]:
        """A `Link: <...>; rel="next"` header (absolute URL, as the client follows it verbatim)."""
        if offset + page >= total:
            return {}
        query = urlencode([(k, v) for k, v in self.params if k != "cursor"] + [("cursor", str(offset + page))])
        return {"Link": f'<{self.hub.url}{path}?{query}>; rel="next"'}

    # -- routing -----------------------------------------------------------------------------

    # One row per endpoint the Hub and Jobs clients call: (methods, path pattern, handler); rows alike by design.
    _ROUTES: tuple[tuple[frozenset[str], re.Pattern[str], str], ...] = tuple(
        (frozenset(methods.split()), re.compile(pattern), name)
        for methods, pattern, name in (
            ("GET", r"^/api/whoami-v2$", "_whoami"),
            ("GET", r"^/api/agent-harnesses$", "_agent_harnesses"),
            ("GET HEAD POST", r"^/api/telemetry(/.*)?$", "_empty_ok"),
            ("POST", r"^/api/validate-yaml$", "_validate_yaml"),
            ("GET", r"^/api/jobs/hardware$", "_hardware"),
            ("POST", r"^/api/jobs/(?P<ns>[^/]+)$", "_create_job"),
            ("GET", r"^/api/jobs/(?P<ns>[^/]+)$", "_list_jobs"),
            ("GET", r"^/api/jobs/(?P<ns>[^/]+)/(?P<job_id>[^/]+)$", "_get_job"),
            ("POST", r"^/api/jobs/(?P<ns>[^/]+)/(?P<job_id>[^/]+)/cancel$", "_cancel_job"),
            ("POST", r"^/api/jobs/(?P<ns>[^/]+)/(?P<job_id>[^/]+)/duplicate$", "_rerun_job"),
            ("GET", r"^/api/jobs/(?P<ns>[^/]+)/(?P<job_id>[^/]+)/logs$", "_job_logs"),
            ("POST", r"^/api/repos/create$", "_create_repo"),
            ("GET POST", r"^/api/(?P<kind>models|datasets|spaces)/(?P<rest>.+)$", "_repo_api"),
            (
                "GET HEAD",
                r"^/(?:(?P<kind>datasets)/)?(?P<repo>[^/]+(?:/[^/]+)?)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$",
                "_resolve",
            ),
        )
    )

    def _route(self) -> None:
        for methods, pattern, name in self._ROUTES:
            if self.command in methods and (match := pattern.match(self.raw_path)):
                getattr(self, name)(**match.groupdict())
                return
        self._error(404, f"Hub emulator: no route for {self.command} {self.raw_path}")

    # -- account and side calls --------------------------------------------------------------

    def _whoami(self) -> None:
        if (tok := self._require_token()) is None:
            return
        access_token: dict[str, Any] = {
            "displayName": f"{tok.user}-{tok.role}",
            "role": tok.role,
            "createdAt": _iso(_now()),
        }
        if tok.role == "fineGrained":
            scoped = [
                {
                    "entity": {"_id": _entity_id(ns), "type": "user" if ns == tok.user else "org", "name": ns},
                    "permissions": list(tok.permissions),
                }
                for ns in tok.namespaces
            ]
            access_token["fineGrained"] = {"canReadGatedRepos": False, "global": [], "scoped": scoped}
        self._json(
            200,
            {
                "type": "user",
                "id": _entity_id(tok.user),
                "name": tok.user,
                "fullname": tok.user.title(),
                "email": f"{tok.user}@example.com",
                "emailVerified": True,
                "canPay": True,
                "isPro": False,
                "orgs": [
                    {"type": "org", "id": _entity_id(org), "name": org, "fullname": org, "roleInOrg": "write"}
                    for org in tok.orgs
                ],
                "auth": {"type": "access_token", "accessToken": access_token},
            },
        )

    def _agent_harnesses(self) -> None:
        self._json(200, {"standardEnvVars": [], "harnesses": {}})

    def _empty_ok(self, **_: str) -> None:
        self._json(200, {})

    def _validate_yaml(self) -> None:
        self._json(200, {"errors": [], "warnings": []})

    # -- jobs --------------------------------------------------------------------------------

    def _hardware(self) -> None:
        self._json(200, self.hub.hardware)

    def _job_namespace(self, ns: str, *, write: bool) -> TokenInfo | None:
        """The caller's token if it may see (or, with write, start and cancel) jobs of `ns`."""
        if (tok := self._require_token()) is None:
            return None
        if ns not in tok.namespaces or (write and not tok.can("job.write")):
            self._error(403, f"You don't have the rights to {'run' if write else 'see'} Jobs in namespace {ns}")
            return None
        return tok

    def _job_json(self, job: EmulatedJob) -> dict[str, Any]:
        now = _now()
        started, finished = job.started_at, job.finished_at
        data = {key: value for key, value in job.spec.items() if key != "attempts"}
        data.update(
            id=job.id,
            createdAt=_iso(job.created_at),
            status={"stage": job.stage, "message": job.message},
            owner={"id": _entity_id(job.namespace), "name": job.namespace, "type": job.owner_type},
            initiator={"type": "user", "id": _entity_id(job.initiator), "name": job.initiator},
            durations={
                "schedulingSecs": int(((started or finished or now) - job.created_at).total_seconds()),
                "runningSecs": int(((finished or now) - started).total_seconds()) if started else None,
                "totalSecs": int(((finished or now) - job.created_at).total_seconds()),
            },
        )
        if "attempts" in job.spec:
            data["retry"] = job.spec["attempts"] - 1
        if started:
            data["startedAt"] = _iso(started)
        if finished:
            data["finishedAt"] = _iso(finished)
        return data

    def _create_job(self, ns: str) -> None:
        if (tok := self._job_namespace(ns, write=True)) is None:
            return
        try:
            spec = json.loads(self.body)
        except ValueError:
            self._error(400, "Invalid JSON body")
            return
        if (problem := _job_spec_problem(spec)) is not None:
            self._error(400, problem)
            return
        secrets = {str(k): str(v) for k, v in (spec.get("secrets") or {}).items()}
        spec["secrets"] = {name: None for name in secrets}  # responses show secret names only
        spec.setdefault("arguments", [])
        spec.setdefault("environment", {})
        owner_type = "user" if ns == tok.user else "org"
        job = self.hub.submit_job(ns, owner_type, tok.user, spec, secrets)
        with self.hub.cond:
            payload = self._job_json(job)
        self._json(200, payload)

    def _list_jobs(self, ns: str) -> None:
        if self._job_namespace(ns, write=False) is None:
            return
        stages = {value.upper() for key, value in self.params if key == "stage"}
        labels = [value.partition("=") for key, value in self.params if key == "label"]
        offset = int(self._param("cursor") or 0)
        with self.hub.cond:
            jobs = [
                job
                for job in sorted(self.hub.jobs.values(), key=lambda j: j.id, reverse=True)
                if job.namespace == ns
                and (not stages or job.stage in stages)
                and all((job.spec.get("labels") or {}).get(k) == v for k, _, v in labels)
            ]
            page = [self._job_json(job) for job in jobs[offset : offset + self.hub.page_size]]
        self._json(200, page, self._next_link(self.raw_path, offset, len(jobs), self.hub.page_size))

    def _find_job(self, ns: str, job_id: str) -> EmulatedJob | None:
        if self._job_namespace(ns, write=False) is None:
            return None
        job = self.hub.jobs.get(job_id)
        if job is None or job.namespace != ns:
            self._error(404, f"Job {job_id} not found")
            return None
        return job

    def _get_job(self, ns: str, job_id: str) -> None:
        if (job := self._find_job(ns, job_id)) is not None:
            with self.hub.cond:
                payload = self._job_json(job)
            self._json(200, payload)

    def _cancel_job(self, ns: str, job_id: str) -> None:
        if self._job_namespace(ns, write=True) is None:
            return
        if (job := self._find_job(ns, job_id)) is not None:
            self.hub.cancel_job(job)
            self._json(200, {})

    def _rerun_job(self, ns: str, job_id: str) -> None:
        if (tok := self._job_namespace(ns, write=True)) is None or (job := self._find_job(ns, job_id)) is None:
            return
        with self.hub.cond:
            spec = json.loads(json.dumps(job.spec))  # a deep copy of the submitted spec
        rerun = self.hub.submit_job(ns, job.owner_type, tok.user, spec, dict(job.secret_values))
        with self.hub.cond:
            payload = self._job_json(rerun)
        self._json(200, payload)

    def _job_logs(self, ns: str, job_id: str) -> None:
        if (job := self._find_job(ns, job_id)) is None:
            return
        tail = self._param("tail")
        with self.hub.cond:
            start = max(0, len(job.events) - int(tail)) if tail else 0
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        except OSError as exc:
            raise _Disconnected from exc
        self._stream_events(job, start)

    def _stream_events(self, job: EmulatedJob, index: int) -> None:
        """Replay then follow `job.events` as SSE chunks; end (or drop, if injected) the stream."""
        drop_after = self.hub.inject.log_drop_threshold()
        sent = 0
        self._chunk(b": keep-alive\n\n")
        while not self.hub.stopping.is_set():
            with self.hub.cond:
                # The condition is shared by all jobs: wait for this one's news or the keep-alive time.
                deadline = time.monotonic() + self.hub.keepalive_interval
                while index >= len(job.events) and job.stage not in TERMINAL_STAGES and not self.hub.stopping.is_set():
                    if (remaining := deadline - time.monotonic()) <= 0:
                        break
                    self.hub.cond.wait(remaining)
                batch = job.events[index:]
                finished = job.stage in TERMINAL_STAGES
            if not batch and not finished:
                self._chunk(b": keep-alive\n\n")
                continue
            for event in batch:
                if drop_after is not None and sent >= drop_after:
                    self.hub.inject.consume_log_drop()
                    self._abort()
                    return
                self._chunk(event.sse())
                sent += 1
                index += 1
            if finished:
                self._write(b"0\r\n\r\n")
                return
        self._abort()

    def _chunk(self, data: bytes) -> None:
        self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def _abort(self) -> None:
        """Close without the final chunk: the client sees an incomplete body (a dropped stream)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        raise _Disconnected

    # -- repos -------------------------------------------------------------------------------

    def _create_repo(self) -> None:
        if (tok := self._require_token()) is None:
            return
        payload = json.loads(self.body or b"{}")
        repo_type = payload.get("type") or "model"
        namespace = payload.get("organization") or tok.user
        repo_id = f"{namespace}/{payload['name']}"
        if repo_type not in ("model", "dataset"):
            self._error(400, f"Hub emulator: repo type {repo_type!r} is not supported")
            return
        if namespace not in tok.namespaces or not tok.can("repo.write"):
            self._error(403, f'You don\'t have the rights to create a {repo_type} under the namespace "{namespace}"')
            return
        url = f"{self.hub.url}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"
        with self.hub.cond:
            if (repo_type, repo_id) in self.hub.repos:
                self._json(409, {"error": f"You already created this {repo_type} repo", "url": url})
                return
            self.hub.add_repo(repo_id, repo_type=repo_type, private=payload.get("visibility") == "private")
        self._json(200, {"url": url, "name": repo_id, "id": _entity_id(f"{repo_type}/{repo_id}")})

    def _readable_repo(self, repo_type: str, repo_id: str) -> Repo | None:
        """The repo if this caller may see it; else a RepoNotFound answer (401 anonymous, 404 otherwise)."""
        repo = self.hub.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and (self.token is None or repo.owner not in self.token.namespaces)):
            status = 401 if self.token is None else 404
            self._error(status, "Repository not found", code="RepoNotFound")
            return None
        return repo

    def _gate_passed(self, repo: Repo) -> bool:
        tok = self.token
        if not repo.gated or (tok is not None and (tok.user in repo.granted or repo.owner in tok.namespaces)):
            return True
        restricted = f"Access to {repo.repo_type} {repo.repo_id} is restricted"
        if tok is None:
            message = f"{restricted}. You must have access to it and be authenticated to access it. Please log in."
            self._error(401, message, code="GatedRepo")
        else:
            visit = f"Visit {self.hub.url}/{repo.url_path} to ask for access."
            self._error(403, f"{restricted} and you are not in the authorized list. {visit}", code="GatedRepo")
        return False

    def _revision(self, repo: Repo, raw_revision: str) -> Commit | None:
        revision = unquote(raw_revision)
        if (commit := repo.resolve(revision)) is None:
            self._error(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
        return commit

    def _writable(self, repo: Repo) -> bool:
        if self.token is None or repo.owner not in self.token.namespaces or not self.token.can("repo.write"):
            self._error(403, f"You don't have the rights to write to {repo.repo_type} {repo.repo_id}")
            return False
        return True

    def _repo_api(self, kind: str, rest: str) -> None:
        segments = rest.split("/")
        split = 2 if len(segments) >= 2 and segments[1] not in REPO_ACTIONS else 1
        repo_id, tail = "/".join(segments[:split]), segments[split:]
        action = tail[0] if tail else None
        handlers = {
            ("GET", None): self._repo_info,
            ("GET", "revision"): self._repo_info,
            ("GET", "auth-check"): self._auth_check,
            ("GET", "tree"): self._list_tree,
            ("POST", "paths-info"): self._paths_info,
            ("POST", "preupload"): self._preupload,
            ("POST", "commit"): self._commit,
        }
        handler = handlers.get((self.command, action))
        if handler is None:
            self._error(404, f"Hub emulator: no route for {self.command} {self.raw_path}")
            return
        with self.hub.cond:
            if (repo := self._readable_repo(kind[:-1], repo_id)) is not None:
                handler(repo, tail[1:])

    def _repo_info(self, repo: Repo, args: list[str]) -> None:
        if (commit := self._revision(repo, args[0] if args else "main")) is None:
            return
        data = _repo_info_json(repo, commit, blobs=self._flag("blobs"))
        if expand := [value for key, value in self.params if key == "expand"]:
            data = {key: value for key, value in data.items() if key in ("_id", "id", *expand)}
        self._json(200, data)

    def _auth_check(self, repo: Repo, args: list[str]) -> None:
        if not self._gate_passed(repo):
            return
        if args == ["write"] and not self._writable(repo):
            return
        self._json(200, {})

    def _list_tree(self, repo: Repo, args: list[str]) -> None:
        if (commit := self._revision(repo, args[0] if args else "main")) is None:
            return
        base = unquote("/".join(args[1:])).strip("/")
        entries = _tree(commit.files, base, recursive=self._flag("recursive"))
        if entries is None:
            self._error(404, f"{base} does not exist on {commit.sha}", code="EntryNotFound")
            return
        if self._flag("expand"):
            last = {"id": commit.sha, "title": commit.title, "date": _iso(commit.date)}
            entries = [{**entry, "lastCommit": last} for entry in entries]
        offset, size = int(self._param("cursor") or 0), self.hub.tree_page_size
        self._json(200, entries[offset : offset + size], self._next_link(self.raw_path, offset, len(entries), size))

    def _paths_info(self, repo: Repo, args: list[str]) -> None:
        if (commit := self._revision(repo, args[0] if args else "main")) is None:
            return
        form = parse_qsl(self.body.decode(), keep_blank_values=True)
        dirs = _directories(commit.files)
        found = []
        for path in (value.strip("/") for key, value in form if key == "paths"):
            if path in commit.files:
                found.append(_file_entry(path, commit.files[path]))
            elif path in dirs:
                found.append(_dir_entry(path, commit.files))
        self._json(200, found)

    def _preupload(self, repo: Repo, args: list[str]) -> None:
        if not self._writable(repo) or (commit := self._revision(repo, args[0] if args else "main")) is None:
            return
        files = []
        for item in json.loads(self.body).get("files", []):
            existing = commit.files.get(item["path"])
            # Everything is uploaded inline ("regular"): the emulator has no LFS/Xet storage.
            files.append(
                {
                    "path": item["path"],
                    "uploadMode": "regular",
                    "shouldIgnore": False,
                    "oid": _git_blob_oid(existing) if existing is not None else None,
                }
            )
        self._json(200, {"files": files, "commitOid": commit.sha})

    def _commit(self, repo: Repo, args: list[str]) -> None:
        if not self._writable(repo) or (commit := self._revision(repo, args[0] if args else "main")) is None:
            return
        if self._flag("create_pr"):
            self._error(400, "Hub emulator: pull requests are not supported")
            return
        branch = unquote(args[0] if args else "main")
        if branch not in repo.branches:
            self._error(400, f"Hub emulator: can only commit to a branch, not {branch}")
            return
        lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        header = next((line["value"] for line in lines if line["key"] == "header"), {})
        changes = []
        for line in lines:
            key, value = line["key"], line["value"]
            if key == "file":
                changes.append(("add", value["path"], base64.b64decode(value["content"])))
            elif key == "deletedFile":
                if value["path"] not in commit.files:
                    self._error(404, "A file with this name doesn't exist", code="EntryNotFound")
                    return
                changes.append(("delete", value["path"], b""))
            elif key == "deletedFolder":
                changes.append(("delete_folder", value["path"], b""))
            elif key == "lfsFile":
                self._error(400, "Hub emulator: LFS files are not supported (preupload always says 'regular')")
                return
        sha = self.hub.commit_files(repo, branch, changes, header.get("summary") or "commit")
        commit_url = f"{self.hub.url}/{repo.url_path}/commit/{sha}"
        self._json(
            200, {"success": True, "commitOid": sha, "commitUrl": commit_url, "hookOutput": "", "pullRequestUrl": None}
        )

    def _resolve(self, kind: str | None, repo: str, rev: str, path: str) -> None:
        with self.hub.cond:
            found = self._readable_repo("dataset" if kind else "model", repo)
            if found is None or not self._gate_passed(found) or (commit := self._revision(found, rev)) is None:
                return
            filename = unquote(path)
            data = commit.files.get(filename)
        headers = {"X-Repo-Commit": commit.sha}
        if data is None:
            self._error(404, "Entry not found", code="EntryNotFound", headers=headers)
            return
        headers.update({"ETag": f'"{_git_blob_oid(data)}"', "Accept-Ranges": "bytes"})
        status, body = 200, data
        if (match := re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))) is not None:
            first = int(match[1])
            last = min(int(match[2]) if match[2] else len(data) - 1, len(data) - 1)
            status, body = 206, data[first : last + 1]
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        self._send(status, body, headers, content_type="application/octet-stream")


def _job_spec_problem(spec: Any) -> str | None:
    """Why the service would refuse this job body (400), or None."""
    from huggingface_hub import JobHardware

    if not isinstance(spec, dict):
        return "Body must be a JSON object"
    command = spec.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(part, str) for part in command):
        return "command must be a non-empty list of strings"
    if not (spec.get("dockerImage") or spec.get("spaceId")):
        return "dockerImage or spaceId is required"
    flavor = spec.get("flavor", "cpu-basic")
    if flavor not in {hw.value for hw in JobHardware} | _EXTRA_FLAVORS:
        return f"Invalid flavor: {flavor}"
    timeout = spec.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or timeout <= 0):
        return "timeoutSeconds must be a positive integer"
    return None


@pytest.fixture
def hub() -> Iterator[HubEmulator]:
    """A fresh emulator per test, also made the client's default endpoint for the test's duration."""
    with HubEmulator() as emulator, emulator.patch_default_endpoint():
        yield emulator
        assert not emulator.errors, "Hub emulator bugs:\n" + "\n".join(emulator.errors)
