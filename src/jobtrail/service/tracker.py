"""Keeping the ledger in step with the backends: read new log lines into events, notice exits
and classify them, start queued attempts while a backend has room, and price what ran.

Every tool call (and the server's poller) calls `refresh()`. State lives in the ledger and the
backends, never in this object, so any number of processes can refresh the same ledger: every
change is a compare-and-set (see ledger/store.py). Servers on several machines may share it: each
follows, starts and stops only the attempts its own backends reach (ServiceContext.reaches: a local
attempt is its host's, a remote one its HF namespace's), and carries out the cancels asked through servers that
could not.

What follows an ending (an evaluation's record, calibration, an automatic retry) is the use
cases' business: the tracker reports each ended
attempt to the `on_ended` observer it was built with. Whether a queued attempt may start, what it
runs and what follows a smoke run are its `StartRules`' (followers.py: pipelines and smoke runs).

It also holds the spending caps (outcomes/budget.py): a remote job whose spend reaches its
max_cost_usd, or while every job's spend is at the daily budget, is cancelled and ends `budget`; a
queued one is not started while the daily budget is spent.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from jobtrail.backends.base import Backend
from jobtrail.backends.logpump import FULL_ERRNOS
from jobtrail.backends.registry import traits_of
from jobtrail.errors import BackendError, InvalidRequestError, JobtrailError
from jobtrail.estimate import Flavor, catalog, load_model_config, record_measurement
from jobtrail.estimate.calibration import checkpointing_of
from jobtrail.estimate.hardware import LOCAL
from jobtrail.estimate.params import model_shape
from jobtrail.ledger.connection import FREE_SPACE, LedgerUnwritable
from jobtrail.ledger.store import ACTIVE_STATUSES
from jobtrail.models import AttemptRecord, JobStatus, LaunchRequest, LogChunk, NewAttempt, Placement, TerminationReason
from jobtrail.outcomes import classify, events
from jobtrail.preflight.outputs import claim_output, create_output_repo, output_moved, pushed_repo
from jobtrail.service import secrets
from jobtrail.service.context import ServiceContext
from jobtrail.service.spending import Spending
from jobtrail.util.refs import looks_local

log = logging.getLogger("jobtrail.service.tracker")
# Ingestion is bounded per refresh, so a backlog of events cannot stall a tool call, and resumes at the next refresh
# where it stopped (the ledger's log_offset): it never stops for good at a size. An attempt that has ended is
# classified only once every event is in (a termination event decides its reason, its steps and checkpoints are
# its receipt), so its ending waits a refresh or two rather than being judged on part of its events.
_INGEST_CHUNKS = 64
_INGEST_BUDGET_S = 2.0
# A launch takes at most the local backend's STATE_WAIT_S (15 s) or an HF API call: a claim older than
# this with no placement was abandoned by a process that died. Its age is read on the ledger's clock
# (ledger/claims.py), never a server's own: a server whose clock runs ahead must not find a live claim stale.
STALE_CLAIM_S = 120.0

AttemptEnded = Callable[[AttemptRecord, TerminationReason], None]


@dataclass(frozen=True)
class Unrecorded:
    """Why refresh() could not bring the ledger up to date, for a read-only tool to say beside its answer."""

    why: str
    fix: str

    @property
    def note(self) -> str:
        return f"Shown as last recorded (jobs may have moved on since): {self.why} {self.fix}"

    @property
    def warning(self) -> dict[str, Any]:
        """As inspect's and wait's warnings are (code, step, message, fix)."""
        return {
            "code": UNRECORDED_CODE,
            "step": None,
            "message": f"Shown as last recorded: {self.why}",
            "fix": self.fix,
        }


UNRECORDED_CODE = "ledger.not_recorded"


class StartRules(Protocol):
    def may_start(self, attempt: AttemptRecord) -> bool:
        """False: a queued attempt waits (or was ended instead of started)."""
        ...

    def prepare(self, attempt: AttemptRecord) -> AttemptRecord:
        """A claimed attempt as it is to run; InvalidRequestError refuses it."""
        ...

    def after_smoke(self, smoke: AttemptRecord) -> NewAttempt:
        """The attempt that follows a smoke run that succeeded; InvalidRequestError ends the run instead."""
        ...


class Tracker:
    def __init__(self, context: ServiceContext, on_ended: AttemptEnded, rules: StartRules) -> None:
        self.context = context
        self.ledger = context.ledger
        self._on_ended = on_ended
        self._rules = rules
        self._flavors: list[Flavor] | None = None  # the live catalog, fetched once per process
        self.spending = Spending(self.ledger, self.cost, context.caps)

    def refresh(self) -> Unrecorded | None:
        """Bring the ledger up to date. None: done. Otherwise nothing could be recorded (a ledger open read-only,
        a full disk under it or under $JOBTRAIL_HOME): a read-only tool then answers from the ledger as last
        recorded and says so with what this returns; a tool that changes something fails on its own write."""
        if self.ledger.read_only:
            return Unrecorded(
                "The ledger is open read-only (serve --read-only): nothing is followed, recorded or started.",
                "Restart the server without --read-only once the ledger is sound (`jobtrail ledger check`).",
            )
        try:
            for attempt in self.ledger.attempts_in(ACTIVE_STATUSES):
                self.refresh_attempt(attempt)
            self.dispatch()
        except LedgerUnwritable as exc:
            log.warning("could not record: %s", exc.message)
            return Unrecorded(exc.message, exc.fix or FREE_SPACE)
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise
            log.warning("could not write under the home: %s", exc)
            return Unrecorded(f"No space left on device writing {exc.filename or 'under $JOBTRAIL_HOME'}.", FREE_SPACE)
        return None

    def refresh_attempt(self, attempt: AttemptRecord) -> None:
        if attempt.status not in (JobStatus.STARTING, JobStatus.RUNNING) or not self.context.reaches(attempt):
            return  # another host's local attempt (its pids and files mean nothing here), another namespace's remote
        placement = self.context.placement(attempt)
        if placement is None:
            self._expire_stale_claim(attempt)
            return
        backend = self.context.backend(attempt.backend)
        try:
            probe = backend.probe(placement)
        except BackendError as exc:  # the backend cannot be asked now: keep what the ledger knows
            log.warning("could not probe %s: %s", attempt.attempt_id, exc)
            return
        # Read the events after probing: an attempt that exited has written all of them by now.
        caught_up = self._ingest(backend, attempt, placement)
        if probe.phase not in ("starting", "running") and not caught_up:
            return  # ended, but events remain to be read: the next refresh reads on, then classifies
        if probe.phase in ("starting", "running"):
            status = JobStatus.STARTING if probe.phase == "starting" else JobStatus.RUNNING
            if status is not attempt.status:
                self.ledger.update_attempt(
                    attempt.attempt_id,
                    expect_status=ACTIVE_STATUSES,
                    status=status,
                    started_at=probe.started_at or attempt.started_at,
                )
            fresh = self.context.attempt(attempt.attempt_id)
            if fresh.cancel_requested_at is None or fresh.cancel_sent_at is not None:
                self._hold_caps(backend, fresh)
                return
            try:
                self.send_cancel(backend, fresh)  # asked through a server that cannot reach it
            except BackendError as exc:
                log.warning("could not stop %s: %s", attempt.attempt_id, exc)
            return
        attempt = self.context.attempt(attempt.attempt_id)
        termination = events.termination_event(self.ledger.events(attempt.attempt_id, "termination"))
        tail = backend.read_tail(placement, classify.TAIL_LINES).lines  # the log's real end, however long it is
        tail = [self.context.redactor(attempt)(line) for line in tail]
        verdict = classify.classify(
            probe.exit,
            termination,
            tail,
            cancel_requested=attempt.cancel_requested_at is not None,
            lost=probe.phase == "lost",
        )
        ended = probe.exit.ended_at if probe.exit else time.time()
        verdict = self._budget_verdict(attempt, verdict, ended)
        reason, message, follow = verdict.reason, verdict.message, None
        if reason is TerminationReason.SUCCEEDED and attempt.smoke_steps:
            try:  # queued in the same transaction: the run is never seen succeeded after its smoke run alone
                follow = self._rules.after_smoke(attempt)
            except InvalidRequestError as exc:
                reason, message = TerminationReason.CONFIG_ERROR, str(exc)
        self.ledger.update_attempt(
            attempt.attempt_id,
            expect_status=ACTIVE_STATUSES,
            then_add=follow,
            status=reason.status,
            termination_reason=reason,
            termination_message=message,
            evidence=verdict.evidence,
            exit_code=probe.exit.exit_code if probe.exit else None,
            signal=probe.exit.signal if probe.exit else None,
            ended_at=ended,
            gpu_seconds=self._gpu_seconds(attempt, ended),
            cost_usd=self.cost(attempt, ended),
        )
        self._on_ended(self.context.attempt(attempt.attempt_id), reason)

    def _hold_caps(self, backend: Backend, attempt: AttemptRecord) -> None:
        """Cancel a running remote attempt whose job has reached a spending cap; it then ends `budget`."""
        if (
            not traits_of(attempt.backend).billed
            or attempt.placement is None
            or attempt.cancel_requested_at is not None
        ):
            return
        run = self.ledger.get_run(attempt.run_id)
        if run is None or self.spending.cap_reached(run, time.time()) is None:
            return
        try:
            backend.cancel(attempt.placement)
        except BackendError as exc:  # asked again at the next refresh
            log.warning("could not stop %s at its spending cap: %s", attempt.attempt_id, exc)
            return
        now = time.time()
        self.ledger.update_attempt(
            attempt.attempt_id,
            expect_status=ACTIVE_STATUSES,
            cancel_requested_at=now,
            cancel_sent_at=now,
            stop_reason=TerminationReason.BUDGET,
        )

    def send_cancel(self, backend: Backend, attempt: AttemptRecord) -> None:
        """Stop an attempt whose cancel was asked for (SIGTERM, then SIGKILL after the grace period; or HF's
        cancel) and record that the backend has it. Without a placement it is being launched, and the launch
        sends it; on a BackendError the request stays, and the next refresh sends it again."""
        if attempt.placement is None:
            return
        backend.cancel(attempt.placement)
        self.ledger.update_attempt(attempt.attempt_id, expect_status=ACTIVE_STATUSES, cancel_sent_at=time.time())

    def _budget_verdict(self, attempt: AttemptRecord, verdict: classify.Diagnosis, ended: float) -> classify.Diagnosis:
        """An attempt jobtrail stopped at a cap ends `budget` (unless it finished first), and so does one that
        HF Jobs stopped at the timeout a cap gave it at launch (_capped_timeout)."""
        if verdict.reason is TerminationReason.SUCCEEDED:
            return verdict
        capped = attempt.stop_reason is TerminationReason.BUDGET
        if not capped and verdict.reason is not TerminationReason.TIMEOUT:
            return verdict
        run = self.ledger.get_run(attempt.run_id)
        reached = self.spending.cap_reached(run, ended) if run else None
        if not capped and reached is None:
            return verdict  # a timeout of its own
        return classify.Diagnosis(TerminationReason.BUDGET, reached or "Stopped by a spending cap.", "spending cap")

    def _flavor(self, name: str | None) -> Flavor | None:
        if not name:
            return None
        if self._flavors is None:
            self._flavors = catalog(self.context.hub_api())[0]  # live prices once per server, else bundled
        return next((f for f in self._flavors if f.name == name), None)

    def cost(self, attempt: AttemptRecord, until: float) -> float | None:
        """Per-minute billing (a billed backend's): the flavor's price times the running time; other runs are free."""
        if not traits_of(attempt.backend).billed:
            return 0.0
        flavor = self._flavor(attempt.flavor)
        if flavor is None or attempt.started_at is None:
            return None
        return round(max(0.0, until - attempt.started_at) / 3600 * flavor.price_per_hour, 6)

    def _gpu_seconds(self, attempt: AttemptRecord, until: float) -> float:
        if attempt.started_at is None:
            return 0.0
        gpus = ((attempt.environment or {}).get("gpu") or {}).get("count") or 0
        if traits_of(attempt.backend).flavors and (flavor := self._flavor(attempt.flavor)) is not None:
            gpus = flavor.gpu_count
        return max(0.0, until - attempt.started_at) * gpus

    def calibrate(self, attempt: AttemptRecord) -> None:
        """Record measured throughput (the steady state of the attempt's step events) and peak memory, so later
        estimates for the same shape use them."""
        summary, config = attempt.summary or {}, attempt.config
        if not summary.get("tokens_per_second") and not summary.get("peak_memory_bytes"):
            return
        try:
            shape = model_shape(load_model_config(config["model"]))
        except JobtrailError as exc:  # calibration is a bonus: never fail the attempt over it
            log.info("no calibration for %s: %s", attempt.attempt_id, exc)
            return
        args = config.get("training_args", {})
        record_measurement(
            self.ledger,
            architecture=shape.architecture,
            params=shape.params,
            method=config.get("template", "sft"),
            peft=(config.get("peft") or {}).get("method", "lora"),
            # The estimator reads this machine's measurements under the local flavor's name (estimate.LOCAL): a local
            # attempt records under the same one, whatever its device.
            flavor=attempt.flavor or LOCAL,
            tokens_per_second=summary.get("tokens_per_second"),
            peak_memory_bytes=summary.get("peak_memory_bytes"),
            max_length=args.get("max_length"),
            batch=args.get("per_device_train_batch_size"),
            attempt_id=attempt.attempt_id,
            gradient_checkpointing=checkpointing_of(args),
        )

    def _ingest(self, backend: Backend, attempt: AttemptRecord, placement: Placement) -> bool:
        """Read the attempt's new events into the ledger; True once none are left to read (see _INGEST_CHUNKS)."""
        redact = self.context.redactor(attempt)
        offset = attempt.log_offset
        deadline = time.monotonic() + _INGEST_BUDGET_S
        for _ in range(_INGEST_CHUNKS):
            chunk = backend.read_events(placement, offset)
            if not chunk.lines:
                return True
            digest = events.digest([redact(line) for line in chunk.lines])
            if not self.ledger.ingest(
                attempt.attempt_id,
                from_offset=offset,
                to_offset=chunk.offset,
                events=digest.events,
                fields=digest.fields,
                checkpoints=digest.checkpoints,
            ):
                return False  # another process is ingesting this attempt: it classifies it once it is done
            offset = chunk.offset
            if time.monotonic() > deadline:
                break
        return False

    def dispatch(self) -> None:
        """Start queued attempts while their backend has room.

        The room is counted in the ledger, in the same transaction that claims the attempt, so the
        limit holds across every server and CLI process sharing this ledger; and so are the run's other
        attempts (a claim is "busy" while one is starting or running): two attempts of a run never run at once."""
        for name, backend in self.context.backends.items():
            now = time.time()
            for attempt in self.ledger.attempts_in([JobStatus.QUEUED.value], name):
                if not self.context.reaches(attempt):
                    continue  # another host's local job, another namespace's remote one: its server starts it
                if attempt.not_before and attempt.not_before > now:
                    continue  # a retry still backing off
                if not self._rules.may_start(attempt):
                    continue  # waits for the job it follows (after=...)
                if traits_of(name).billed and self._refuse_over_daily(attempt, now):
                    continue
                host = self.context.backend_host(name)  # recorded on an attempt of no host: it is ours now
                claim = self.ledger.claim_slot(attempt.attempt_id, name, backend.max_concurrent, host)
                if claim == "full":
                    break
                if claim == "claimed":
                    self._launch(backend, attempt)

    def _refuse_over_daily(self, attempt: AttemptRecord, now: float) -> bool:
        """A queued remote attempt is not started while the daily budget is spent: it ends `budget` at once
        (cancelled, saying so) rather than waiting, because a job that started hours later on its own, when
        older spend left the window, would spend money nobody is watching. retry(job_id) queues it again."""
        refusal = self.spending.daily_reached(now, started=False)
        if refusal is None:
            return False
        if self.ledger.update_attempt(
            attempt.attempt_id,
            expect_status=[JobStatus.QUEUED.value],
            status=TerminationReason.BUDGET.status,
            termination_reason=TerminationReason.BUDGET,
            termination_message=refusal,
            ended_at=now,
        ):
            self._on_ended(self.context.attempt(attempt.attempt_id), TerminationReason.BUDGET)
        return True

    def _launch(self, backend: Backend, attempt: AttemptRecord) -> None:
        """Start an attempt this process has claimed (claim_slot); a refusal ends it with the reason."""
        try:
            attempt = self._rules.prepare(attempt)
            self._claim_output(attempt)
            if repo := pushed_repo(attempt.config):  # preflight judged whether the token may: submit acts no more
                create_output_repo(self.context.hub_api(), repo)
            request = LaunchRequest(
                attempt_id=attempt.attempt_id,
                script=self.ledger.script(attempt.script_sha256),
                workdir=str(self.context.workdir(attempt)),
                env=_job_env(attempt, self.context.trackio_dir),
                secrets=self._secret_values(attempt),
                secret_sources=_secret_sources(attempt),
                timeout_s=self._capped_timeout(attempt),
                flavor=attempt.flavor,
                output_dir=attempt.output_dir,
                labels=attempt_labels(attempt),
            )
            placement = backend.launch(request)
        except (BackendError, InvalidRequestError) as exc:
            reason = TerminationReason(getattr(exc, "reason", TerminationReason.CONFIG_ERROR.value))
            self.ledger.update_attempt(
                attempt.attempt_id,
                status=reason.status,
                termination_reason=reason,
                termination_message=self.context.redactor(attempt)(str(exc)),
                ended_at=time.time(),
            )
            return
        recorded = self.ledger.update_attempt(
            attempt.attempt_id,
            expect_status=ACTIVE_STATUSES,
            status=JobStatus.STARTING,
            placement=placement,
            started_at=placement.started_at,
            timeout_s=request.timeout_s,  # the receipt says the timeout it runs with, a cap's included
        )
        launched = self.context.attempt(attempt.attempt_id)
        if not recorded and launched.placement is None:
            # The claim was expired while this launch took longer than STALE_CLAIM_S (the attempt ended `lost`,
            # and a retry may already run): this job is nobody's, and two attempts of a run must not train at
            # once, so it is stopped. (Adopted meanwhile, it has this placement and is followed as usual.)
            log.warning("stopping %s: its claim expired while it was being launched", attempt.attempt_id)
            try:
                backend.cancel(placement)
            except BackendError as exc:
                log.warning("could not stop %s: %s", attempt.attempt_id, exc)
            return
        if launched.cancel_requested_at is not None:
            # Cancelled while it was being launched: the canceller had no placement to signal yet.
            self.send_cancel(backend, launched)

    def _capped_timeout(self, attempt: AttemptRecord) -> int | None:
        """A remote attempt's timeout, cut to what its job's cap has left at the flavor's price: HF Jobs then
        stops it there even when no jobtrail process is running to watch the spend (it ends `budget`)."""
        run = self.ledger.get_run(attempt.run_id)
        flavor = self._flavor(attempt.flavor) if traits_of(attempt.backend).billed else None
        if run is None or run.max_cost_usd is None or flavor is None or flavor.price_per_hour <= 0:
            return attempt.timeout_s
        left = max(0.0, run.max_cost_usd - self.spending.of_run(run.run_id))
        # Rounded up: stopped there, it has reached the cap (so it ends `budget`); HF bills at least a minute.
        affordable = max(60, math.ceil(left / flavor.price_per_hour * 3600))
        return affordable if attempt.timeout_s is None else min(attempt.timeout_s, affordable)

    def _claim_output(self, attempt: AttemptRecord) -> None:
        """A local job's chosen output directory becomes its run's (outputs.claim_output) before it starts:
        preflight judged it at submission, and it may have been filled, claimed by another run, or swapped for a
        symlink to somewhere else since (outputs.output_moved): each is a refusal, and nothing is written there."""
        if traits_of(attempt.backend).output != "directory" or not (attempt.spec and attempt.spec.output):
            return
        planned = Path(attempt.output_dir)
        moved = output_moved(planned, self.context.home)
        if moved:
            raise InvalidRequestError(
                f"Not started: {moved}. A job writes only where preflight judged it may; nothing was written.",
                fix=f"Put a real directory back at {planned} (no symlink) and submit again, or submit with "
                "output=<a new directory>, or leave output out; if nobody meant to change it, find out who did first.",
            )
        problem = claim_output(planned, attempt.run_id)
        if problem:
            raise InvalidRequestError(
                f"Not started: {problem}.", fix="Submit again with output=<a new directory>, or leave output out."
            )

    def _expire_stale_claim(self, attempt: AttemptRecord) -> None:
        """A claimed attempt that never got a placement: the process that claimed it stopped before (or
        while) launching it. Past STALE_CLAIM_S, one launched all the same is found (a remote one by its labels,
        a local one by the supervisor files in its workdir) and followed from then on; otherwise it frees its
        slot as `lost`, which a retry resumes."""
        claimed_at = attempt.started_at or attempt.created_at
        # The claim was stamped on the ledger's clock, so its age is read there too (ledger/claims.py).
        if attempt.status is not JobStatus.STARTING or self.ledger.now() - claimed_at < STALE_CLAIM_S:
            return
        try:
            placement = self.context.backend(attempt.backend).find(
                attempt_labels(attempt), str(self.context.workdir(attempt)), _secret_sources(attempt)
            )
        except BackendError as exc:  # asked again at the next refresh
            log.warning("could not look for %s on its backend: %s", attempt.attempt_id, exc)
            return
        if placement is not None:
            # Launched, then its launcher died: adopt it, as its labels (remote) or its own workdir's supervisor
            # files (local) say it is this one. Probed and its log read at once, a job that has ended meanwhile
            # ends as its exit and termination event say, never `lost`.
            if self.ledger.update_attempt(
                attempt.attempt_id,
                expect_status=[JobStatus.STARTING.value],
                placement=placement,
                started_at=placement.started_at,
            ):
                self.refresh_attempt(self.context.attempt(attempt.attempt_id))
            return
        # Re-checked in the transaction that ends it: a launch recorded since the check above wins.
        if self.ledger.expire_claim(
            attempt.attempt_id,
            STALE_CLAIM_S,
            status=TerminationReason.LOST.status,
            termination_reason=TerminationReason.LOST,
            termination_message="The process that claimed this attempt stopped before it was launched.",
            ended_at=self.ledger.now(),
        ):
            self._on_ended(self.context.attempt(attempt.attempt_id), TerminationReason.LOST)

    def _secret_values(self, attempt: AttemptRecord) -> dict[str, str]:
        values = secrets.resolve(attempt.spec.secrets if attempt.spec else {})
        token = self.context.hub_token
        if token:
            # Remote jobs push their results with the user's token; a local job has it from the
            # server's environment anyway. As a secret it is also hidden from the job's log.
            values.setdefault("HF_TOKEN", token)
        return values

    def read_lines(self, backend: Backend, placement: Placement, cursor: int | None, count: int) -> LogChunk:
        """From `cursor`: the next `count` lines. Without one: the last `count` lines."""
        if cursor is not None:
            chunk = backend.read_log(placement, cursor, max_lines=count)
            if chunk.end is not None and cursor > chunk.end:  # no read returned it: no line would ever follow
                raise InvalidRequestError(
                    f"cursor={cursor} is past the end of the log (it ends at cursor {chunk.end}); a cursor is the "
                    "one a previous logs call returned.",
                    fix=f"Pass cursor={chunk.end} to read what the job prints next, or leave cursor out for its "
                    "last lines.",
                )
            return chunk
        return backend.read_tail(placement, count)  # from the end: never the whole log to find its last lines


def _secret_sources(attempt: AttemptRecord) -> list[str]:
    """The server's environment variables the attempt's secrets come from (names: see Placement)."""
    return [ref[1:] for ref in (attempt.spec.secrets if attempt.spec else {}).values()]


def attempt_labels(attempt: AttemptRecord) -> dict[str, str]:
    """A remote attempt's labels: enough to find it on the backend again when its placement was never recorded."""
    return {
        "jobtrail-run": attempt.run_id,
        "jobtrail-attempt": str(attempt.number),
        "jobtrail-config-sha256": attempt.config_sha256,
    }


def _job_env(attempt: AttemptRecord, trackio_dir: Path) -> dict[str, str]:
    env = {"JOBTRAIL_RUN_ID": attempt.run_id, "JOBTRAIL_ATTEMPT_ID": attempt.attempt_id}
    traits = traits_of(attempt.backend)
    if traits.trackio == "folder":  # one trackio store for every such job: one dashboard shows them all
        env["TRACKIO_DIR"] = str(trackio_dir)
    spec = attempt.spec
    if traits.runs_here and spec and looks_local(spec.model) and (not spec.dataset or looks_local(spec.dataset)):
        # Nothing to fetch: keep the libraries from phoning the Hub (and hanging when offline).
        env["HF_HUB_OFFLINE"] = "1"
    return env
