"""JobService: the one object the MCP tools, the CLI and the demo call. Each method hands its call
to a use-case module (runs: submit, retry, cancel; tasks: evaluate, convert; queries: ps, inspect,
logs, report and the planning helpers; watch: wait, metrics, plot) that share one ServiceContext
and one Tracker.

Every use case first refreshes the tracker, so any tool call (or the server's poller) advances
jobs; state lives in the ledger and the attempt directories, never in these objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobtrail.backends.base import Backend
from jobtrail.estimate import EstimateResult, HardwareResult
from jobtrail.ledger.store import Ledger
from jobtrail.models import AttemptRecord, JobSpec, JobStatus, TerminationReason
from jobtrail.preflight.dataset import DatasetReport
from jobtrail.requests import (
    DEFAULT_DAYS,
    DEFAULT_GROUP_BY,
    DEFAULT_LIMIT,
    DEFAULT_SPLIT,
    DEFAULT_TAIL,
    DEFAULT_WAIT_S,
    ConvertRequest,
    EstimateRequest,
    EvaluateRequest,
    SubmitOptions,
)
from jobtrail.results.jobs import CancelResult, InspectResult, LogsResult, PsResult, RetryResult
from jobtrail.results.release import ReleaseResult
from jobtrail.results.submit import SubmitResult
from jobtrail.results.tasks import ConvertResult, EvaluateResult, ReportResult
from jobtrail.results.watch import MetricsResult, PlotResult, ProgressSink, WaitResult
from jobtrail.service.context import ServiceContext
from jobtrail.service.followers import Followers
from jobtrail.service.queries import Queries
from jobtrail.service.runs import Runs
from jobtrail.service.spending import Caps
from jobtrail.service.tasks import Tasks
from jobtrail.service.tracker import Tracker
from jobtrail.service.watch import Watch


class JobService:
    def __init__(
        self,
        ledger: Ledger,
        backends: Mapping[str, Backend],
        home: Path,
        job_python: str,
        hub_token: str | None = None,
        cancel_wait_s: float = 20.0,
        caps: Caps | None = None,
    ) -> None:
        self.context = ServiceContext(
            ledger=ledger, backends=backends, home=home, job_python=job_python, hub_token=hub_token, caps=caps or Caps()
        )
        self._tracker = Tracker(self.context, on_ended=self._attempt_ended, rules=Followers(self.context))
        self._tasks = Tasks(self.context, self._tracker)
        self._runs = Runs(self.context, self._tracker, self._tasks, cancel_wait_s=cancel_wait_s)
        self._queries = Queries(self.context, self._tracker)
        self._watch = Watch(self.context, self._tracker, self._queries)

    @property
    def ledger(self) -> Ledger:
        return self.context.ledger

    @property
    def home(self) -> Path:
        return self.context.home

    # --- runs -------------------------------------------------------------------------

    def submit(self, spec: JobSpec, options: SubmitOptions | None = None) -> SubmitResult:
        return self._runs.submit(spec, options or SubmitOptions())

    def retry(self, job_id: str, changes: dict[str, Any] | None = None) -> RetryResult:
        return self._runs.retry(job_id, changes)

    def cancel(self, job_id: str) -> CancelResult:
        return self._runs.cancel(job_id)

    def release(self, job_id: str) -> ReleaseResult:
        return self._runs.release(job_id)

    def refresh(self) -> None:
        self._tracker.refresh()

    # --- tasks ------------------------------------------------------------------------

    def evaluate(self, request: EvaluateRequest) -> EvaluateResult:
        return self._tasks.evaluate(request)

    def convert_gguf(self, request: ConvertRequest) -> ConvertResult:
        return self._tasks.convert_gguf(request)

    # --- queries ----------------------------------------------------------------------

    def ps(self, status: str | None = None, limit: int = DEFAULT_LIMIT) -> PsResult:
        return self._queries.ps(status, limit)

    def inspect(self, job_id: str) -> InspectResult:
        return self._queries.inspect(job_id)

    def logs(
        self, job_id: str, tail: int = DEFAULT_TAIL, cursor: int | None = None, attempt: int | None = None
    ) -> LogsResult:
        return self._queries.logs(job_id, tail, cursor, attempt)

    def report(self, days: float = DEFAULT_DAYS, group_by: str = DEFAULT_GROUP_BY) -> ReportResult:
        return self._queries.report(days, group_by)

    def hardware(self) -> HardwareResult:
        return self._queries.hardware()

    def estimate_cost(self, request: EstimateRequest) -> EstimateResult:
        return self._queries.estimate_cost(request)

    def validate_dataset(
        self,
        dataset: str,
        method: str | None = None,
        split: str = DEFAULT_SPLIT,
        model: str | None = None,
        max_length: int | None = None,
    ) -> DatasetReport:
        return self._queries.validate_dataset(dataset, method, split, model, max_length)

    # --- watching a run ---------------------------------------------------------------

    def wait(
        self, job_id: str, timeout_s: float = DEFAULT_WAIT_S, on_progress: ProgressSink | None = None
    ) -> WaitResult:
        return self._watch.wait(job_id, timeout_s, on_progress)

    def metrics(
        self, job_id: str, names: list[str] | None = None, since_step: int | None = None, attempt: int | None = None
    ) -> MetricsResult:
        return self._watch.metrics(job_id, names, since_step, attempt)

    def plot(self, job_id: str, metrics: list[str] | None = None) -> PlotResult:
        return self._watch.plot(job_id, metrics)

    # --- what follows an ending -------------------------------------------------------

    def _attempt_ended(self, attempt: AttemptRecord, reason: TerminationReason) -> None:
        """The tracker's observer: an evaluation's record; after training, calibration and the final
        evaluation; after a failure, an automatic retry within submit's max_retries. A smoke run is
        followed by its full job (the tracker queues it) or ends the run: no final evaluation, no retry."""
        if attempt.config.get("template") == "evaluate":
            self._tasks.record_evaluation(attempt)
        elif reason is TerminationReason.SUCCEEDED:
            self._tracker.calibrate(attempt)
            if not attempt.smoke_steps:
                self._tasks.evaluate_after_training(attempt.run_id)
        if reason.status is JobStatus.FAILED and not attempt.smoke_steps:
            self._runs.auto_retry(attempt.run_id)
