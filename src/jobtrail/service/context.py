"""What every use case shares: the ledger, the backends, the home directory, the job's Python and
the Hub token, with the small look-ups and record builders they all need. One object, passed to all.

State lives in the ledger and the attempt directories, never here, so any number of processes can
serve the same ledger.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from secrets import choice
from typing import Any

from jobtrail.backends.base import Backend
from jobtrail.backends.registry import traits_of
from jobtrail.errors import BackendError, InvalidRequestError, NotFoundError
from jobtrail.ledger.store import Ledger, RunIdTaken
from jobtrail.models import AttemptRecord, JobSpec, JobStatus, NewAttempt, Placement, RunRecord
from jobtrail.preflight.facts import PlanEnv
from jobtrail.preflight.job_refs import names_a_job
from jobtrail.service import secrets
from jobtrail.service.spending import Caps
from jobtrail.util.digest import config_json, sha256_text
from jobtrail.util.refs import looks_local

_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32: no i, l, o, u
_ID_DRAWS = 8  # 32^8 ids: a second draw taken too means the generator is broken, not unlucky


@dataclass(frozen=True)
class ServiceContext:
    ledger: Ledger
    backends: Mapping[str, Backend]
    home: Path
    job_python: str
    hub_token: str | None = None
    caps: Caps = field(default_factory=Caps)

    def hub_api(self) -> Any:
        from huggingface_hub import HfApi  # on first use: the server starts without it

        return HfApi(token=self.hub_token)

    def backend(self, name: str) -> Backend:
        try:
            return self.backends[name]
        except KeyError:
            raise InvalidRequestError(
                f"Unknown backend {name!r}.", fix=f"Use one of: {', '.join(sorted(self.backends))}"
            ) from None

    def reaches(self, attempt: AttemptRecord) -> bool:
        """Whether this server can start, follow and stop the attempt: it has the attempt's backend, and that
        backend's host is the attempt's (a local attempt's machine, a remote one's HF namespace). An attempt
        recorded before hosts (or namespaces) were, host None, is whichever server's claims it first."""
        return attempt.backend in self.backends and attempt.host in (None, self.backend_host(attempt.backend))

    def reached_by(self, attempt: AttemptRecord) -> str:
        """Who can start, follow and stop the attempt, in words: its host's server, or any with its backend."""
        if attempt.host is None:
            return f"a jobtrail server with the {attempt.backend} backend"
        traits = traits_of(attempt.backend)
        if traits.runs_here:
            return f"the jobtrail server of {traits.host_noun} {attempt.host}"
        return f"a jobtrail server whose {traits.place} run {traits.host_in} {attempt.host} ({traits.host_set_by})"

    def here(self, backend: str) -> str:
        """This server as `backend`'s attempts know it, in words: "host gpu-box-1", "namespace alice"."""
        host, noun = self.backend_host(backend), traits_of(backend).host_noun
        return f"{noun} {host}" if host else f"whose {backend} {noun} is unknown now"

    def backend_host(self, backend: str) -> str | None:
        """The host of this server's backend `backend` (Backend.host: local, this machine; hf-jobs, the namespace it
        launches in); None when this server has no such backend or cannot learn it now (no token, Hub unreachable):
        it then reaches only attempts of no host."""
        found = self.backends.get(backend)
        if found is None:
            return None
        try:
            return found.host
        except BackendError:
            return None

    def placement(self, attempt: AttemptRecord) -> Placement | None:
        """Where this server follows the attempt: its placement, except that every server that reaches a remote
        attempt (one with a remote_id) follows it into its own workdir, each keeping its own copy of the log there
        (the launching server's is on its machine)."""
        placement = attempt.placement
        if placement is None or placement.remote_id is None:
            return placement
        return placement.model_copy(update={"workdir": str(self.workdir(attempt))})

    @property
    def host(self) -> str | None:
        """This server's host in the ledger: its machine's, as a backend running jobs here names it (None when it
        has none)."""
        return next((b.host for name, b in self.backends.items() if traits_of(name).runs_here), None)

    def host_for(self, backend: str, reads: str | None = None) -> str | None:
        """The host a new job's attempts belong to: the host of the job whose output it reads (`reads`: the job it
        follows, starts from, evaluates or converts) when that job ran on the same backend (a local job's files are
        on its machine, a remote job's model in its namespace), else this server's backend's (for hf-jobs, the
        namespace it launches in: the job is run and billed there; BackendError when it cannot be learned)."""
        source = self.ledger.get_run(reads) if reads else None
        if source is not None:
            latest = self.latest(source.run_id)
            if latest.backend == backend and latest.host is not None:
                return latest.host
        return self.backend(backend).host

    def add_run(
        self, run: RunRecord, attempt: NewAttempt, request: dict[str, Any] | None = None
    ) -> tuple[RunRecord, NewAttempt, str | None]:
        """Insert a new run and its first attempt (Ledger.add_run): the run and attempt as inserted, and the id of
        the run that already holds its idempotency key (then nothing was inserted). Ids are drawn at random by
        every server sharing the ledger: one that another run holds is never overwritten, nor is the submit
        refused; the run takes a fresh id and is inserted again."""
        for _ in range(_ID_DRAWS):
            try:
                return run, attempt, self.ledger.add_run(run, attempt, request)
            except RunIdTaken:
                run, attempt = _renamed(run, attempt, new_run_id())
        raise RuntimeError(f"{_ID_DRAWS} random job ids in a row were taken: the id generator is broken.")

    def run(self, job_id: str) -> RunRecord:
        run = self._job(job_id)
        if run is None:
            raise NotFoundError(
                f"No job with id {job_id!r}.", fix="Call ps to list job ids (they look like 'jt-4f9k2m7q')."
            )
        return run

    def named_job(self, text: str, argument: str) -> RunRecord | None:
        """The job an argument that takes a job id or a model (a path, a Hub id) names; None for a model. Text
        shaped like a job id that no job has is refused, never read as a Hub id: 'jt-9gvacez' (a character short)
        would start a job on a model that does not exist."""
        run = self._job(text)
        key = text.strip()
        if run is None and names_a_job(key):
            raise NotFoundError(
                f"{argument}={text!r} looks like a job id, and no job has it.",
                fix="Call ps to list job ids (they look like 'jt-4f9k2m7q'); a Hub model id looks like 'org/name', "
                "a local model is a directory path.",
            )
        return run

    def _job(self, job_id: str) -> RunRecord | None:
        """The job with this id; ids are Crockford base32, so 'JT-4F9K2M7Q' is 'jt-4f9k2m7q' written in capitals."""
        key = job_id.strip()
        return self.ledger.get_run(key) or (self.ledger.get_run(key.lower()) if key.lower() != key else None)

    def latest(self, run_id: str) -> AttemptRecord:
        """A run's newest attempt, whose status is the run's."""
        return self.ledger.attempts(run_id)[-1]

    def attempt(self, attempt_id: str) -> AttemptRecord:
        found = self.ledger.get_attempt(attempt_id)
        assert found is not None
        return found

    def workdir(self, attempt: AttemptRecord) -> Path:
        return self.home / "runs" / attempt.run_id / f"attempt-{attempt.number}"

    @property
    def trackio_dir(self) -> Path:
        return trackio_dir(self.home)

    def output_dir(self, run_id: str, config: Mapping[str, Any]) -> str:
        """Where an attempt of run `run_id` with `config` writes: the directory its CONFIG names (the caller's
        choice, or a remote job's own), else the run's own, which the local backend gives the job at launch.
        Every attempt of a run gets the same one: a retry resumes from the checkpoints there."""
        return config.get("output_dir") or str(self.home / "runs" / run_id / "output")

    def plan_env(self, run_id: str) -> PlanEnv:
        """What preflight planning needs from the service for run `run_id`."""
        cache = Path(os.environ.get("JOBTRAIL_LLAMA_CPP_CACHE") or self.home / "cache" / "llama.cpp")
        return PlanEnv(
            job_python=self.job_python,
            llama_cpp_cache=cache,
            hub_token=self.hub_token,
            ledger=self.ledger,
            hub_api=self.hub_api,
            run_id=run_id,
            home=self.home,
        )

    def redactor(self, attempt: AttemptRecord) -> secrets.Redactor:
        """Every secret value this attempt could have seen, and every credential of the server's environment
        (given to it or not), so none reaches a result or the ledger."""
        references = attempt.spec.secrets if attempt.spec else {}
        values = [os.environ.get(ref[1:], "") for ref in references.values()]
        return secrets.Redactor([self.hub_token or "", *values, *secrets.credential_values(os.environ)])


def trackio_dir(home: Path) -> Path:
    """Where local jobs keep their trackio runs (the job's TRACKIO_DIR; `jobtrail dashboard` shows it)."""
    return home / "trackio"


def new_run_id() -> str:
    return "jt-" + "".join(choice(_ID_ALPHABET) for _ in range(8))


def _renamed(run: RunRecord, attempt: NewAttempt, run_id: str) -> tuple[RunRecord, NewAttempt]:
    """A new run and its first attempt under another id. The id is a random token, and every field that holds it
    was made from it (the attempt's id, the run's directories, a smoke run's config and script), so it is
    replaced wherever it appears; the fingerprints are taken again."""
    old = run.run_id
    renamed = RunRecord.model_validate_json(run.model_dump_json().replace(old, run_id))
    first = NewAttempt.model_validate_json(attempt.model_dump_json().replace(old, run_id))
    fingerprints = {"config_sha256": sha256_text(config_json(first.config)), "script_sha256": sha256_text(first.script)}
    return renamed, first.model_copy(update=fingerprints)


def local_path(ref: str) -> str:
    """Local paths become absolute, because the job runs in its own directory; Hub ids stay."""
    ref = ref.strip()
    return str(Path(ref).expanduser().resolve()) if looks_local(ref) else ref


def new_run(run_id: str, spec: JobSpec, created_at: float, **settings: Any) -> RunRecord:
    """The run of `spec`; `settings` are the RunRecord fields the caller decides (flavor, max_retries, max_cost_usd,
    idempotency_key)."""
    summary = spec.model_dump(include={"method", "model", "dataset", "backend"})  # the run's columns, as asked
    return RunRecord(run_id=run_id, created_at=created_at, spec=spec, **summary, **settings)


def queued_attempt(
    run_id: str, number: int, spec: JobSpec, config: dict[str, Any], script: str, **receipt: Any
) -> NewAttempt:
    """Attempt `number` of a run, queued, with its config and script fingerprinted.

    `receipt` holds the rest of what is known before it runs (output_dir, flavor, created_at, findings,
    backoff ...).
    """
    receipt.setdefault("created_at", time.time())
    receipt.setdefault("flavor", spec.flavor)
    return NewAttempt(
        attempt_id=f"{run_id}/{number}",
        run_id=run_id,
        number=number,
        status=JobStatus.QUEUED,
        backend=spec.backend,
        timeout_s=spec.timeout_s,
        config=config,
        config_sha256=sha256_text(config_json(config)),
        script=script,
        script_sha256=sha256_text(script),
        spec=spec,
        **receipt,
    )
