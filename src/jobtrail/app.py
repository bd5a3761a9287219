"""Composition root: the only module that names concrete backends and reads settings.

Settings come from the environment so the MCP client config can set them:
  JOBTRAIL_HOME            ledger and job directories (default ~/.jobtrail)
  JOBTRAIL_LEDGER_URL      postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE: the ledger in PostgreSQL, shared by
                           a team's servers (default: SQLite, $JOBTRAIL_HOME/ledger.sqlite)
  JOBTRAIL_MAX_CONCURRENT  local jobs running at once on this host (default 1; others wait queued)
  JOBTRAIL_PYTHON          interpreter that runs local jobs (default: this one)
  JOBTRAIL_LOG_MAX_BYTES   a local job's job.log at most: its head and a rolling tail, the middle dropped and
                           marked (default 64 MiB, at least 64 KiB); its events are kept apart, never capped
  JOBTRAIL_HOST_ID         this machine's name in a shared ledger (default: its hostname): a server starts,
                           follows and stops only its own host's local jobs
  JOBTRAIL_JOB_ENV_PASS    comma-separated names of the server's variables a local job gets besides those it
                           needs to run (backends/job_env.py RULES); never a JOBTRAIL_* one
  JOBTRAIL_DATA_ROOTS      folders (separated by os.pathsep, ':' here) that data, models, reward files and path
                           hyperparameters must resolve under (default: the working directory and the home;
                           never a hidden, system or jobtrail's own folder: preflight/data_roots.py); required
                           for `serve --http` beyond loopback
  HF_TOKEN                 Hugging Face token: Hub checks, HF Jobs, pushing results
  JOBTRAIL_HF_NAMESPACE    user or org that runs HF Jobs (default: the token's user)
  JOBTRAIL_MAX_COST_USD    a job's spending cap in US dollars unless submit passes max_cost_usd (default: none)
  JOBTRAIL_DAILY_BUDGET_USD  every job's spend in the last 24 hours, at most (default: none)
  JOBTRAIL_READ_ONLY       1: open the ledger read-only and change nothing (`serve --read-only`): ps, inspect, logs,
                           metrics and wait answer from it as it is; what would change it is refused (a damaged
                           ledger is read this way while it is saved: ledger/db.py)
  JOBTRAIL_WEBHOOK_URL     `serve` POSTs a job's summary and next calls there when it ends, raises an alert or is
                           held; with JOBTRAIL_WEBHOOK_SECRET (HMAC-SHA256 signature), JOBTRAIL_WEBHOOK_EVENTS
                           (ended,alert,held) and JOBTRAIL_WEBHOOK_FORMAT (json, slack): service/webhook.py
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jobtrail.backends import job_env, logpump
from jobtrail.errors import InvalidRequestError
from jobtrail.ledger.connection import LEDGER_URL_ENV
from jobtrail.outcomes import budget
from jobtrail.service.change_feed import ChangeFeed
from jobtrail.service.webhook import Webhook, WebhookSettings, webhook_settings
from jobtrail.util.files import private_dir
from jobtrail.util.money import CAP_ENV, DAILY_ENV
from jobtrail.util.roots import data_roots, jobtrail_home

if TYPE_CHECKING:
    from jobtrail.service.facade import JobService

HOST_ID_ENV = "JOBTRAIL_HOST_ID"
READ_ONLY_ENV = "JOBTRAIL_READ_ONLY"
_HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def home() -> Path:
    return jobtrail_home()


@dataclass(frozen=True)
class Settings:
    """The server's settings, read from the environment and checked: a wrong one is refused before anything starts."""

    home: Path  # private (0700), created if need be
    python: str
    hub_token: str | None
    log_max_bytes: int
    max_concurrent: int
    host_id: str | None
    job_env_pass: tuple[str, ...]
    hf_namespace: str | None
    max_cost_usd: float | None
    daily_budget_usd: float | None
    read_only: bool = False
    webhook: WebhookSettings | None = None


def settings(home_dir: Path | None = None) -> Settings:
    data_roots()  # checked now, so a wrong one stops the start; preflight reads it wherever it judges a path
    return Settings(
        home=private_home(home_dir or home()),
        python=os.environ.get("JOBTRAIL_PYTHON") or sys.executable,
        hub_token=os.environ.get("HF_TOKEN") or None,
        log_max_bytes=_positive_int(logpump.MAX_BYTES_ENV, logpump.DEFAULT_MAX_BYTES),
        max_concurrent=_positive_int("JOBTRAIL_MAX_CONCURRENT", 1),
        host_id=_host_id(HOST_ID_ENV),
        job_env_pass=job_env.pass_names(os.environ.get(job_env.PASS_ENV)),
        hf_namespace=os.environ.get("JOBTRAIL_HF_NAMESPACE") or None,
        max_cost_usd=_dollars(CAP_ENV),
        daily_budget_usd=_dollars(DAILY_ENV),
        read_only=_read_only(),
        webhook=webhook_settings(os.environ),
    )


def build_service(home_dir: Path | None = None) -> JobService:
    return service_of(settings(home_dir))


def service_of(config: Settings) -> JobService:
    """The service and its backends on these settings."""
    # Imported here, not at the top: `jobtrail serve` reads its settings at start and builds the service (the
    # planner, estimator, templates and classifier it brings) on first use, after it has answered tools/list.
    from jobtrail.backends.hf_jobs import HfJobsBackend
    from jobtrail.backends.local import LocalBackend
    from jobtrail.ledger.store import Ledger
    from jobtrail.service.facade import JobService
    from jobtrail.service.spending import Caps

    local = LocalBackend(
        python=config.python,
        max_concurrent=config.max_concurrent,
        host=config.host_id,
        log_max_bytes=config.log_max_bytes,
        job_env_pass=config.job_env_pass,
    )
    hf_jobs = HfJobsBackend(token=config.hub_token, namespace=config.hf_namespace, log_max_bytes=config.log_max_bytes)
    return JobService(
        ledger=Ledger(ledger_location(config.home), read_only=config.read_only),
        backends={local.name: local, hf_jobs.name: hf_jobs},
        home=config.home,
        job_python=config.python,
        hub_token=config.hub_token,
        caps=Caps(default_max_cost_usd=config.max_cost_usd, daily_budget_usd=config.daily_budget_usd),
    )


def on_first_use(config: Settings) -> Callable[[], JobService]:
    """The service on these settings, built once, by whichever thread asks first (a tool call, the poller)."""
    lock = threading.Lock()
    built: list[JobService] = []

    def service() -> JobService:
        with lock:
            if not built:
                built.append(service_of(config))
            return built[0]

    return service


def change_feed(config: Settings, service: Callable[[], JobService]) -> ChangeFeed:
    """What `serve`'s poller fills after each refresh: the resources' subscribers and the webhook (if set) hear it."""
    feed = ChangeFeed()
    if config.webhook is not None:
        feed.subscribe(Webhook(config.webhook, service))
    return feed


def ledger_location(root: Path) -> Path | str:
    """JOBTRAIL_LEDGER_URL's PostgreSQL ledger, else the SQLite file in the home folder `root`."""
    return os.environ.get(LEDGER_URL_ENV) or root / "ledger.sqlite"


def private_home(root: Path) -> Path:
    """The home folder, created (or narrowed to) 0700: it holds the user's data, logs and models."""
    try:
        return private_dir(root)
    except OSError as exc:
        raise InvalidRequestError(
            f"Cannot make jobtrail's home {root} a private folder: {exc.strerror or exc}",
            fix="Point JOBTRAIL_HOME at a folder of your own (or unset it for ~/.jobtrail).",
        ) from exc


def _host_id(name: str) -> str | None:
    """JOBTRAIL_HOST_ID, checked; None: the local backend names the machine by its hostname."""
    raw = (os.environ.get(name) or "").strip()
    if raw and not _HOST_ID.fullmatch(raw):
        raise InvalidRequestError(
            f"{name}={raw[:80]!r} is not a host name.",
            fix=f"Set {name} to letters, digits, '.', '_' or '-' (at most 128), e.g. gpu-box-1, or unset it.",
        )
    return raw or None


def _read_only() -> bool:
    raw = (os.environ.get(READ_ONLY_ENV) or "").strip().lower()
    if raw not in ("", "0", "1", "true", "false"):
        raise InvalidRequestError(
            f"{READ_ONLY_ENV}={raw[:20]!r} is neither on nor off.", fix=f"Set {READ_ONLY_ENV}=1, or unset it."
        )
    return raw in ("1", "true")


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise InvalidRequestError(f"{name}={raw!r} is not a positive integer.", fix=f"Set {name}=1 (or more).")
    return int(raw)


def _dollars(name: str) -> float | None:
    raw = os.environ.get(name)
    return budget.parse_cap(raw, name) if raw not in (None, "") else None
