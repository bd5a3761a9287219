"""A job's notices to a webhook, for clients that cannot be told themselves (no MCP tasks, no subscription): when
a job ends, raises an alert or is held, `jobtrail serve` POSTs its summary and next calls to JOBTRAIL_WEBHOOK_URL.

Settings (read at start by app.py, checked there):
  JOBTRAIL_WEBHOOK_URL     http(s) endpoint; unset: no webhook
  JOBTRAIL_WEBHOOK_SECRET  signs each body: header X-Jobtrail-Signature-256: sha256=<HMAC-SHA256 of the body, hex>
  JOBTRAIL_WEBHOOK_EVENTS  comma-separated, of ended, alert, held (default: all three)
  JOBTRAIL_WEBHOOK_FORMAT  json (default: the payload below) or slack ({"text": ...}, for a Slack incoming webhook)

Sending never runs on a tool call's path: the change feed's listener (the poller's thread) only queues the notice,
and one worker thread of its own sends it, TRIES times at most with a doubling backoff (a 5xx, a 429, a timeout or
a refused connection is tried again; any other answer is final). Before sending, the notice's row is claimed in the
ledger (ledger/deliveries.py: one server sends it, even when several follow the ledger); after, its outcome (sent,
status_code, tries, error) is recorded there: inspect shows it as the job's `webhooks`. Every string of the
payload goes through the job's redactor (the job's secrets, the server's credentials, the webhook's own secret),
and an error recorded never quotes the URL (a Slack webhook's URL is itself a secret).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from jobtrail import __version__
from jobtrail.errors import InvalidRequestError
from jobtrail.service.change_feed import Change, JobChange
from jobtrail.util.redaction import Redactor

if TYPE_CHECKING:
    from jobtrail.service.facade import JobService

log = logging.getLogger("jobtrail.service.webhook")
URL_ENV = "JOBTRAIL_WEBHOOK_URL"
SECRET_ENV = "JOBTRAIL_WEBHOOK_SECRET"
EVENTS_ENV = "JOBTRAIL_WEBHOOK_EVENTS"
FORMAT_ENV = "JOBTRAIL_WEBHOOK_FORMAT"
SIGNATURE_HEADER = "X-Jobtrail-Signature-256"
EVENT_HEADER = "X-Jobtrail-Event"
DELIVERY_HEADER = "X-Jobtrail-Delivery"
Event = Literal["ended", "alert", "held"]
EVENTS: dict[Change, Event] = {Change.ENDED: "ended", Change.ALERT: "alert", Change.HELD: "held"}
Form = Literal["json", "slack"]
FORMS: tuple[Form, ...] = ("json", "slack")
QUEUED_AT_MOST = 1000  # notices waiting for the worker; past it (an endpoint dead for hours) new ones are dropped
_RETRIED_STATUS = frozenset({408, 425, 429})


@dataclass(frozen=True)
class WebhookSettings:
    url: str
    secret: str | None = None
    events: frozenset[Event] = frozenset(EVENTS.values())
    form: Form = "json"
    timeout_s: float = 10.0  # one POST, connecting included
    tries: int = 4
    backoff_s: float = 2.0  # before the 2nd try; doubled before each later one (2, 4, 8 s)


def webhook_settings(environ: Mapping[str, str]) -> WebhookSettings | None:
    """The webhook's settings from the environment, checked (a wrong one stops the start); None: no webhook."""
    url = (environ.get(URL_ENV) or "").strip()
    if not url:
        for name in (SECRET_ENV, EVENTS_ENV, FORMAT_ENV):
            if environ.get(name):
                raise InvalidRequestError(
                    f"{name} is set but {URL_ENV} is not: there is no webhook to send to.",
                    fix=f"Set {URL_ENV}=https://... (the endpoint to POST to), or unset {name}.",
                )
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequestError(
            f"{URL_ENV} is not an http(s) URL with a host (not shown here: a webhook's URL may hold its secret).",
            fix=f"Set {URL_ENV}=https://host/path, e.g. a Slack incoming webhook's URL with {FORMAT_ENV}=slack.",
        )
    named = [e.strip() for e in (environ.get(EVENTS_ENV) or "").split(",") if e.strip()]
    unknown = [e for e in named if e not in EVENTS.values()]
    if unknown:
        raise InvalidRequestError(
            f"{EVENTS_ENV} names {', '.join(repr(e) for e in unknown)}: the events are ended, alert and held.",
            fix=f"Set {EVENTS_ENV}=ended,alert,held (or fewer of them), or unset it for all three.",
        )
    form = (environ.get(FORMAT_ENV) or "json").strip().lower()
    if form not in FORMS:
        raise InvalidRequestError(
            f"{FORMAT_ENV}={form[:20]!r} is not a format.",
            fix=f"Set {FORMAT_ENV}=json (jobtrail's payload) or slack (a Slack-compatible text), or unset it.",
        )
    events = frozenset(e for e in EVENTS.values() if e in named) or frozenset(EVENTS.values())
    return WebhookSettings(
        url=url, secret=environ.get(SECRET_ENV) or None, events=events, form="slack" if form == "slack" else "json"
    )


def notice_of(change: JobChange) -> str:
    """The notice's key in the job's receipt: one per ending, alert and hold of an attempt."""
    event = EVENTS[change.change]
    return f"{event}:{change.attempt}" if event != "alert" else f"alert:{change.attempt}:{change.detail}"


def signature(secret: str, body: bytes) -> str:
    """The signature header's value: what a receiver recomputes over the raw body and compares
    (hmac.compare_digest) before it trusts the payload."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Outcome:
    sent: bool
    status_code: int | None
    tries: int
    error: str | None


def post(settings: WebhookSettings, body: bytes, headers: dict[str, str]) -> Outcome:
    """POST `body`, tried again after a 5xx, a retried 4xx, a timeout or a failed connection, settings.tries at most."""
    import httpx  # the worker's thread imports it, not the server's start

    status: int | None = None
    error: str | None = None
    with httpx.Client(timeout=settings.timeout_s, follow_redirects=False) as client:
        for tried in range(1, settings.tries + 1):
            try:
                status = client.post(settings.url, content=body, headers=headers).status_code
            except httpx.TimeoutException:
                status, error = None, f"no answer within {settings.timeout_s:g} s"
            except httpx.TransportError as exc:  # its message may quote the URL: only its kind is kept
                status, error = None, f"could not connect ({type(exc).__name__})"
            else:
                if 200 <= status < 300:
                    return Outcome(True, status, tried, None)
                error = f"the endpoint answered HTTP {status}"
                if status < 500 and status not in _RETRIED_STATUS:
                    return Outcome(False, status, tried, error)
            if tried < settings.tries:
                time.sleep(settings.backoff_s * 2 ** (tried - 1))
    return Outcome(False, status, settings.tries, error)


class Webhook:
    """The change feed's listener that queues the job's notices, and the worker thread that sends them."""

    def __init__(self, settings: WebhookSettings, service: Callable[[], JobService]) -> None:
        self.settings = settings
        self._service = service
        self._queue: queue.Queue[JobChange] = queue.Queue(QUEUED_AT_MOST)
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, change: JobChange) -> None:
        event = EVENTS.get(change.change)
        if event is None or event not in self.settings.events:
            return
        try:
            self._queue.put_nowait(change)
        except queue.Full:
            log.warning("webhook: %d notices wait already; %s not sent", QUEUED_AT_MOST, notice_of(change))
            return
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="jobtrail-webhook", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            change = self._queue.get()
            try:
                self.deliver(change)
            except Exception:  # the worker outlives one notice it could not build or record
                log.exception("webhook: could not deliver %s of %s", notice_of(change), change.job_id)
            finally:
                self._queue.task_done()

    def deliver(self, change: JobChange) -> Outcome | None:
        """Claim, build, send and record one notice; None: another server claimed it."""
        service = self._service()
        event, notice = EVENTS[change.change], notice_of(change)
        if not service.ledger.claim_delivery(change.job_id, notice, event, change.attempt):
            return None
        # The job's secrets and the server's credentials; and the webhook's own secret, however it was given.
        redactors = [
            service.context.redactor(service.context.latest(change.job_id)),
            Redactor([self.settings.secret or ""]),
        ]
        payload = self._payload(service, change, event, notice)
        for redactor in redactors:
            payload = _redacted(payload, redactor)
        body = json.dumps(slack_form(payload) if self.settings.form == "slack" else payload).encode()
        headers = {
            "Content-Type": "application/json",
            EVENT_HEADER: event,
            DELIVERY_HEADER: f"{change.job_id}/{notice}",
        }
        if self.settings.secret:
            headers[SIGNATURE_HEADER] = signature(self.settings.secret, body)
        outcome = post(self.settings, body, headers)
        service.ledger.record_delivery(
            change.job_id,
            notice,
            sent=outcome.sent,
            status_code=outcome.status_code,
            tries=outcome.tries,
            error=outcome.error,
        )
        return outcome

    @staticmethod
    def _payload(service: JobService, change: JobChange, event: Event, notice: str) -> dict[str, Any]:
        """The job as inspect reports it now: its summary and next calls first."""
        job = service.inspect(change.job_id)
        return {
            "event": event,
            "notice": notice,
            "detail": change.detail,
            "job_id": job.job_id,
            "attempt": change.attempt,
            "status": job.status,
            "termination_reason": job.termination_reason,
            "summary": job.summary,
            "next_steps": [step.model_dump(mode="json") for step in job.next_steps],
            "alerts": job.alerts,
            "method": job.method,
            "model": job.model,
            "backend": job.backend,
            "last_committed_checkpoint": job.last_committed_checkpoint.path if job.last_committed_checkpoint else None,
            "sent_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "jobtrail_version": __version__,
        }


_BOLD = re.compile(r"\*\*(.+?)\*\*")


def slack_form(payload: dict[str, Any]) -> dict[str, str]:
    """A Slack incoming webhook's body: one text, in Slack's mrkdwn (*bold*, not **bold**)."""
    what = {"ended": "ended", "alert": "raised an alert", "held": "is held"}[payload["event"]]
    head = f"jobtrail: {payload['job_id']} {what} ({payload['detail']})"
    return {"text": head + "\n" + _BOLD.sub(r"*\1*", payload["summary"])}


def _redacted(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor.text(value)
    if isinstance(value, list):
        return [_redacted(item, redactor) for item in value]
    if isinstance(value, dict):
        return {redactor.text(key): _redacted(item, redactor) for key, item in value.items()}
    return value
