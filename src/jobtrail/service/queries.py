"""What the ledger and the backends can tell without changing anything: the job list, one job's
receipt, its logs, the report by reason, and the planning helpers (hardware, estimate_cost,
validate_dataset)."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any

from jobtrail.backends.registry import traits_of
from jobtrail.errors import InvalidRequestError
from jobtrail.estimate import EstimateResult, HardwareResult, hardware_report
from jobtrail.ledger.store import ACTIVE_STATUSES
from jobtrail.models import AttemptRecord, EvalRow, JobStatus, RunRecord, TerminationReason
from jobtrail.outcomes import events
from jobtrail.outcomes.evals import EvalRecord, delta
from jobtrail.preflight.data_size import measured_data
from jobtrail.preflight.dataset import DatasetReport, validate_dataset
from jobtrail.preflight.plan import estimate_alone
from jobtrail.requests import REPORT_GROUPS, EstimateRequest
from jobtrail.results.attempt_note import attempt_note, lineage
from jobtrail.results.jobs import AttemptView, ChainLink, InspectResult, JobRow, LogsResult, PsResult, empty_list_note
from jobtrail.results.progress import AttemptFacts, Progress, job_progress, timeout_warning
from jobtrail.results.tasks import JOB_CAPS_LISTED, JobCap, ReportResult, ReportRow
from jobtrail.results.trackio_run import trackio_run
from jobtrail.service import chaining, next_steps, request_steps
from jobtrail.service.context import local_path
from jobtrail.service.retry_state import retries_stopped
from jobtrail.service.use_case import UseCase
from jobtrail.templates.configs import launcher_of
from jobtrail.util.timefmt import human_duration

MAX_LINE_CHARS = 2000
# What a job list row and a receipt show of the run, as the ledger holds it.
_RUN_FIELDS = {"method", "model", "dataset", "backend", "created_at"}
# What an attempt's receipt shows as the ledger holds it; the rest is converted or computed.
_ATTEMPT_FIELDS = tuple(
    name
    for name in AttemptView.model_fields
    if name in AttemptRecord.model_fields and name not in ("status", "termination_reason", "cost_usd")
)


class Queries(UseCase):
    def ps(self, status: str | None, limit: int) -> PsResult:
        unrecorded = self.tracker.refresh()
        rows = []
        now = time.time()
        listed = self.ledger.list_runs(status, limit)
        run_ids = [run.run_id for run, _ in listed]
        children = self.ledger.children(run_ids)
        # Every listed run's attempts and events at once: a shared PostgreSQL ledger is a round trip a query.
        attempts = self.ledger.attempts_of(run_ids)
        logged = self.ledger.events_of([a.attempt_id for run_attempts in attempts.values() for a in run_attempts])
        for run, attempt in listed:
            metrics = attempt.last_metrics or {}
            rows.append(
                JobRow(
                    job_id=run.run_id,
                    **_state(attempt),
                    attempts=attempt.number,
                    step=metrics.get("step"),
                    loss=metrics.get("loss"),
                    progress=self.progress(attempts[run.run_id], now, logged),
                    after=run.spec.after,
                    children=children.get(run.run_id, []),
                    host=attempt.host,
                    alerts=[str(a["code"]) for a in events.alerts(logged.get(attempt.attempt_id, []))],
                    **_run_fields(run),
                )
            )
        any_jobs = bool(rows) or bool(self.ledger.list_runs(None, 1))
        note = None if rows else empty_list_note(status, any_jobs=any_jobs)
        steps = request_steps.listing([(row.job_id, row.status) for row in rows], others=any_jobs and not rows)
        said = [unrecorded.note if unrecorded else None, note]
        return PsResult(jobs=rows, status_filter=status, note=" ".join(filter(None, said)) or None, next_steps=steps)

    def inspect(self, job_id: str) -> InspectResult:
        run = self.context.run(job_id)
        unrecorded = self.tracker.refresh()
        attempts = self.ledger.attempts(run.run_id)
        latest = attempts[-1]
        views = [self._attempt_view(a) for a in attempts]
        now = time.time()
        logged = self.ledger.events_of([a.attempt_id for a in attempts])
        progress = self.progress(attempts, now, logged)
        late = timeout_warning(run.run_id, progress, attempt_facts(latest), now)
        evaluations = self.ledger.evals_of(run.run_id)
        committed = self.ledger.committed_checkpoints(run.run_id)  # never a smoke run's
        trackio = next((v.trackio for v in reversed(views) if v.trackio), None)
        return InspectResult(
            job_id=run.run_id,
            **_state(latest),
            termination_message=latest.termination_message,
            hyperparameters=run.spec.hyperparameters,
            progress=progress,
            attempt_note=self.attempt_note(attempts, logged),
            last_metrics=latest.last_metrics,
            checkpoints=[c for v in views for c in v.checkpoints],
            last_committed_checkpoint=committed[-1] if committed else None,
            attempts=views,
            artifacts=[e for a in attempts for e in self.ledger.events(a.attempt_id, "artifact")],
            # "warning" events: what jobs printed before alerts replaced them (a ledger keeps old receipts).
            warnings=events.warnings(self.ledger.events(latest.attempt_id, "warning"))
            + [w for w in (late, unrecorded.warning if unrecorded else None) if w],
            alerts=events.alerts(self.ledger.events(latest.attempt_id, "alert")),
            evaluation=self.own_evaluation(run),
            evaluations=[asdict(e) for e in evaluations],
            eval_delta=_eval_delta(evaluations),
            waiting_for=self.waiting_for(latest),
            retries_stopped=retries_stopped(self.ledger, run, attempts),
            init_from=run.spec.init_from,
            max_cost_usd=run.max_cost_usd,
            spent_usd=round(self.tracker.spending.of_run(run.run_id, now), 6),
            speedups=latest.config.get("speedups"),
            after=self._link(run.spec.after) if run.spec.after else None,
            children=[self._link(child) for child in self.ledger.children([run.run_id]).get(run.run_id, [])],
            host=latest.host,
            followed_here=self.context.reaches(latest),
            trackio=trackio,
            webhooks=self.ledger.deliveries(run.run_id),
            next_steps=next_steps.now(self.context, run, attempts, "inspect", trackio),
            **_run_fields(run),
        )

    def progress(
        self, attempts: list[AttemptRecord], now: float, logged: dict[str, list[dict[str, Any]]] | None = None
    ) -> Progress:
        """The run's progress: step, rate, phase and ETA of the latest attempt alone, losses of the attempts it
        continues. `logged`: the attempts' events when the caller read them already."""
        logged = logged if logged is not None else self.ledger.events_of([a.attempt_id for a in attempts])
        latest = attempts[-1]
        latest_events = logged[latest.attempt_id]
        steps = [e for a in lineage(attempts) for e in logged[a.attempt_id] if e.get("event") == "step"]
        return job_progress(steps, latest_events, attempt_facts(latest), now)

    def attempt_note(
        self, attempts: list[AttemptRecord], logged: dict[str, list[dict[str, Any]]] | None = None
    ) -> str | None:
        """The line announcing the latest attempt when it is not the first (results/attempt_note.py)."""
        if len(attempts) < 2:
            return None
        logged = logged if logged is not None else self.ledger.events_of([a.attempt_id for a in attempts])
        earlier = [c for a in lineage(attempts)[:-1] for c in self.ledger.checkpoints(a.attempt_id)]
        return attempt_note(attempts, logged, earlier)

    def own_evaluation(self, run: RunRecord) -> dict[str, Any] | None:
        """An evaluation job's own result: what it evaluated (a job, or a model alone) and its metrics."""
        found = self.ledger.eval_by_job(run.run_id) if run.method == "evaluate" else None
        if found is None:
            return None
        evaluates, row = found
        return {"evaluates": evaluates or run.model, **asdict(row)}

    def _attempt_view(self, a: AttemptRecord) -> AttemptView:
        end = a.ended_at or (time.time() if a.started_at else None)
        return AttemptView(
            **_state(a),
            duration_s=(end - a.started_at) if (a.started_at and end) else None,
            checkpoints=self.ledger.checkpoints(a.attempt_id),
            # A running remote attempt costs what it has run so far.
            cost_usd=a.cost_usd if a.ended_at or not traits_of(a.backend).billed else self.tracker.cost(a, time.time()),
            workdir=self._workdir(a),
            launcher=launcher_of(a.config),
            trackio=trackio_run(
                [*self.ledger.events(a.attempt_id, "trackio"), *self.ledger.events(a.attempt_id, "alert")]
            ),
            **{name: getattr(a, name) for name in _ATTEMPT_FIELDS},
        )

    def _workdir(self, attempt: AttemptRecord) -> str | None:
        """The attempt's directory: another host's is on that host, where its placement says (None until placed)."""
        if self.context.reaches(attempt):
            return str(self.context.workdir(attempt))
        return attempt.placement.workdir if attempt.placement else None

    def logs(self, job_id: str, tail: int, cursor: int | None, attempt_number: int | None = None) -> LogsResult:
        if tail < 1:
            raise InvalidRequestError("tail must be at least 1.", fix="Pass tail=50 (or any positive number).")
        run = self.context.run(job_id)
        unrecorded = self.tracker.refresh()
        attempts = self.ledger.attempts(run.run_id)
        attempt = numbered_attempt(attempts, attempt_number, run.run_id)
        lines: list[tuple[str, bool]] = []
        end, at_end = 0, True
        placement = self.context.placement(attempt)
        if placement is not None:  # a queued attempt has no log yet
            backend = self.context.backend(attempt.backend)
            chunk = self.tracker.read_lines(backend, placement, cursor, tail)
            end = chunk.offset
            at_end = backend.read_log(placement, end).lines == []
            redact = self.context.redactor(attempt)
            lines = [_cut(redact(line)) for line in chunk.lines]
        finished = attempt.status.is_terminal and at_end
        elsewhere = None if lines or attempt.placement is None or self.context.reaches(attempt) else _elsewhere(attempt)
        waiting_for = self.waiting_for(attempt)
        steps = request_steps.reading(run.run_id, attempt.number, attempts[-1].number, finished, waiting_for, end)
        return LogsResult(
            job_id=run.run_id,
            attempt=attempt.number,
            lines=[line for line, _ in lines],
            finished=finished,
            next_steps=steps,
            cursor=end,
            truncated_lines=sum(1 for _, was_cut in lines if was_cut),
            status=attempt.status.value,
            latest_attempt=attempts[-1].number,
            waiting_for=waiting_for,
            note=unrecorded.note if unrecorded else elsewhere,
        )

    def _link(self, job_id: str) -> ChainLink:
        run, latest = self.context.run(job_id), self.context.latest(job_id)
        return ChainLink(
            job_id=job_id,
            method=run.method,
            status=latest.status.value,
            termination_reason=_value(latest.termination_reason),
        )

    def waiting_for(self, attempt: AttemptRecord) -> str | None:
        """What keeps a queued attempt from starting: the job it follows, a retry's backoff, or the jobs holding
        its backend's slots."""
        if attempt.status is not JobStatus.QUEUED:
            return None
        parent = chaining.hold_reason(self.context, attempt) or chaining.waiting_on_parent(self.context, attempt)
        if parent:
            return parent
        now = time.time()
        if attempt.not_before and attempt.not_before > now:
            return f"a retry's backoff: it may start in {human_duration(attempt.not_before - now)}"
        if not self.context.reaches(attempt):
            here = self.context.here(attempt.backend)
            return f"{self.context.reached_by(attempt)} to start it (this server, {here}, cannot)"
        limit = self.context.backend(attempt.backend).max_concurrent
        # The slots it competes for: its host's, for a local job; its namespace's, for a remote one.
        rivals = [a for a in self.ledger.attempts_in(ACTIVE_STATUSES, attempt.backend) if a.host == attempt.host]
        ahead = [
            a
            for a in self.ledger.attempts_in([JobStatus.QUEUED.value], attempt.backend)
            if a.created_at < attempt.created_at and a.host == attempt.host
        ]
        on_host = ""
        if attempt.host:
            on_host = f" {traits_of(attempt.backend).host_in} {attempt.host}"
        if limit is None or len(rivals) < limit:
            return f"the next dispatch on {attempt.backend}{on_host}" + (f", behind {_jobs(ahead)}" if ahead else "")
        slots = f"{limit} slot{'s' if limit != 1 else ''}"
        holding = f"{_jobs(rivals)} holding the {attempt.backend} backend's {slots}{on_host}"
        return holding + (f", then {_jobs(ahead)} queued ahead of it" if ahead else "")

    def report(self, days: float, group_by: str) -> ReportResult:
        if days <= 0:
            raise InvalidRequestError(f"days={days} is not positive.", fix="Pass days=7 (or any positive number).")
        if group_by not in REPORT_GROUPS:
            raise InvalidRequestError(f"Cannot group by {group_by!r}.", fix=f"Use one of: {', '.join(REPORT_GROUPS)}")
        self.tracker.refresh()
        rows = [
            ReportRow(
                termination_reason=r.group if group_by == "termination_reason" else None,
                group=r.group,
                attempts=r.attempts,
                gpu_hours=round(r.gpu_hours, 4),
                cost_usd=round(r.cost_usd, 4),
            )
            for r in self.ledger.report(time.time() - days * 86400, group_by)
        ]
        now, caps = time.time(), self.context.caps
        capped_jobs, job_caps = self._job_caps(now - days * 86400, now)
        total = sum(r.attempts for r in rows)
        return ReportResult(
            days=days,
            group_by=group_by,
            rows=rows,
            next_steps=request_steps.reported(total, days, group_by),
            total_attempts=total,
            total_gpu_hours=round(sum(r.gpu_hours for r in rows), 4),
            total_cost_usd=round(sum(r.cost_usd for r in rows), 4),
            spent_last_24h_usd=round(self.tracker.spending.last_24h(now), 6),
            daily_budget_usd=caps.daily_budget_usd,
            default_max_cost_usd=caps.default_max_cost_usd,
            capped_jobs=capped_jobs,
            job_caps=job_caps,
        )

    def _job_caps(self, since: float, now: float) -> tuple[int, list[JobCap]]:
        """How many remote jobs of the window have a cap, and those to look at: each one's spend (its ended
        attempts' costs, its running one's so far) against its cap."""
        running = self.tracker.spending.running_by_run(now)
        count, states = self.ledger.cap_states(since, JOB_CAPS_LISTED)
        return count, [
            JobCap(
                job_id=cap.run_id,
                status=cap.status,
                termination_reason=cap.termination_reason,
                max_cost_usd=cap.max_cost_usd,
                spent_usd=round(cap.spent_ended + running.get(cap.run_id, 0.0), 6),
            )
            for cap in states
        ]

    # --- planning helpers: no job involved ------------------------------------------

    def hardware(self) -> HardwareResult:
        result = hardware_report(api=self.context.hub_api())
        return result.model_copy(update={"next_steps": request_steps.flavors(result)})

    def estimate_cost(self, request: EstimateRequest) -> EstimateResult:
        model, dataset = local_path(request.model), local_path(request.dataset) if request.dataset else None
        # A local data file is counted with the model's tokenizer (validate_dataset's pass), not characters/4.
        measured = measured_data(dataset, request.method, model) if dataset else None
        request = replace(request, model=model, dataset=dataset)
        result = estimate_alone(
            request,
            data=measured,
            calibration=self.ledger,
            api=self.context.hub_api(),
            tune_micro_batch=True,  # as submit does: the tool estimates the job submit would run
        )
        return result.model_copy(update={"next_steps": request_steps.estimated(request, result)})

    def validate_dataset(
        self, dataset: str, method: str | None, split: str, model: str | None, max_length: int | None
    ) -> DatasetReport:
        dataset, model = local_path(dataset), local_path(model) if model else None
        report = validate_dataset(dataset, method, split=split, model=model, max_length=max_length)
        return report.model_copy(update={"next_steps": request_steps.validated(report, model)})


def attempt_facts(attempt: AttemptRecord) -> AttemptFacts:
    args = attempt.config.get("training_args", {})
    return AttemptFacts(
        status=attempt.status.value,
        max_steps=args.get("max_steps"),
        num_train_epochs=args.get("num_train_epochs"),
        started_at=attempt.started_at,
        timeout_s=attempt.timeout_s,
    )


def _run_fields(run: RunRecord) -> dict[str, Any]:
    return run.model_dump(include=_RUN_FIELDS)


def _eval_delta(evaluations: list[EvalRow]) -> dict[str, float] | None:
    """final − base on the same task set, when both evaluations finished (lower loss is better)."""
    done = {e.checkpoint: e for e in evaluations if e.state == "finished" and e.record}
    if "base" not in done or "final" not in done:
        return None
    if done["base"].task_set_sha256 != done["final"].task_set_sha256:
        return None
    return delta(EvalRecord.model_validate(done["base"].record), EvalRecord.model_validate(done["final"].record))


def _elsewhere(attempt: AttemptRecord) -> str:
    """Why the log of an attempt this server does not reach reads empty here."""
    recorded = f'metrics(job_id="{attempt.run_id}") and inspect carry what its server recorded.'
    traits = traits_of(attempt.backend)
    at = f"{traits.host_in} {attempt.host}"
    if not traits.runs_here:
        return f"Its log is on {traits.place} {at}, which this server's token cannot read; {recorded}"
    return f"Its log is a file {at}, which this server cannot read unless the hosts share $JOBTRAIL_HOME; {recorded}"


def _jobs(attempts: list[AttemptRecord]) -> str:
    """Job ids with the attempt number where it is not the first: "jt-a1b2c3d4, jt-e5f6g7h8 (attempt 2)"."""
    return ", ".join(a.run_id + (f" (attempt {a.number})" if a.number > 1 else "") for a in attempts)


def numbered_attempt(attempts: list[AttemptRecord], number: int | None, run_id: str) -> AttemptRecord:
    """Attempt `number` of a run (1 is the first), or its latest when no number is given."""
    if number is None:
        return attempts[-1]
    for attempt in attempts:
        if attempt.number == number:
            return attempt
    raise InvalidRequestError(
        f"{run_id} has no attempt {number}; it has {len(attempts)}.",
        fix=f"Pass attempt=1 to {len(attempts)}, or leave attempt out for the latest.",
    )


def _cut(line: str) -> tuple[str, bool]:
    if len(line) <= MAX_LINE_CHARS:
        return line, False
    return line[:MAX_LINE_CHARS] + f" …[cut {len(line) - MAX_LINE_CHARS} chars]", True


def _value(reason: TerminationReason | None) -> str | None:
    return reason.value if reason else None


def _state(attempt: AttemptRecord) -> dict[str, Any]:
    """A job's state as every result names it: its latest attempt's status and termination_reason."""
    return {"status": attempt.status.value, "termination_reason": _value(attempt.termination_reason)}
