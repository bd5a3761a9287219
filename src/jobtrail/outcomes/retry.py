"""Retries spend from a budget tied to the termination reason. Pure.

Given a run's attempt history and the caller's proposed changes, `decide` says whether a new
attempt may start, after what delay and with which changes, and, when it refuses, the fix.
Changes are weighed first: a change that addresses the cause (a longer timeout or a faster
config after a timeout, a new memory shape after an OOM, any real change after an unknown
failure or a diverged loss) is allowed even when the budget is spent or the storm guard would
stop the same config, so the fix a refusal names is never a dead end; a change that changes
nothing is refused. A diverged run is never retried without a change: the same learning rate
would lose the loss again, so the refusal proposes one (a learning rate ten times lower). A job a
spending cap stopped (budget) is never retried automatically, and by hand only while it is under its
cap: a larger max_cost_usd in the changes resumes it. A full disk is retried once, automatically too, when the
disk it filled has the room the next checkpoint needs again (JobFacts.disk); while it is known to lack it, the
refusal says how much to free where; where the need is not known, a retry by hand after freeing space is taken.
Every attempt of a run shares its output directory, so a new attempt always continues from
the newest committed checkpoint (the job runtime finds and verifies it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobtrail.methods.registry import method_spec
from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.budget import raise_cap_to, reached
from jobtrail.results.endings import NEVER
from jobtrail.util.money import usd
from jobtrail.util.timefmt import parse_duration


@dataclass(frozen=True)
class Budget:
    retries: int
    backoff_s: float = 0.0  # first delay; doubles with each retry for the same reason
    charged: bool = True  # counts toward the storm guard (preemption is not the config's fault)


BUDGETS: dict[R, Budget] = {
    # Transient failures are not the config's fault either; with the storm guard on, two in a
    # row would stop the run and the budget of 3 could never be spent.
    R.INFRA_TRANSIENT: Budget(3, backoff_s=30.0, charged=False),
    R.PREEMPTED: Budget(5, charged=False),
    R.LOST: Budget(5, charged=False),
    R.TIMEOUT: Budget(2),
    R.OOM: Budget(2),
    R.EVAL_FAILED: Budget(2),
    R.HUB_ERROR: Budget(2),
    # A full disk fills again on the same disk: retried once, when the disk has the room the next checkpoint needs
    # again (JobFacts.disk), or by hand once space is freed where how much is needed is not known.
    R.DISK_FULL: Budget(1),
}
# Hyperparameters whose change alters the memory a step needs.
MEMORY_SHAPE_KEYS = ("per_device_train_batch_size", "max_length", "gradient_checkpointing", "peft")
# Retry changes that are fields of the job, not hyperparameters (`timeout` in seconds).
JOB_KEYS = ("timeout", "flavor", "dataset_mapping", "max_cost_usd")
# Hyperparameters whose smaller value makes a run finish sooner.
SHORTER_KEYS = ("max_steps", "num_train_epochs", "max_length", "gradient_accumulation_steps")


@dataclass(frozen=True)
class AttemptFacts:
    number: int
    reason: R | None
    config_sha256: str
    last_step: int | None  # the last step the attempt logged
    start_step: int | None  # the step it resumed from (None: from scratch)


@dataclass(frozen=True)
class DiskRoom:
    """The disk a job ran out of space on, as it is now: where (the job's termination event named it), what is free
    there now, and what the next checkpoint needs (the last one's size; None: not known)."""

    path: str
    free_bytes: int
    needed_bytes: int | None


@dataclass(frozen=True)
class JobFacts:
    """The job a retry decision weighs beyond its attempts: the JOB_KEYS its latest attempt ran with (a change is
    compared with them) and what a fix names: its id and method, the learning rate and training_args it trained
    with (defaults included: the memory shape an oom halves), its cap and what all its attempts cost."""

    job_id: str | None = None
    method: str | None = None
    timeout: int | None = None  # seconds
    flavor: str | None = None
    dataset_mapping: dict[str, Any] | None = None
    max_cost_usd: float | None = None
    learning_rate: Any = None  # as the config holds it; read as a number where it is one
    ran_with: dict[str, Any] | None = None
    spent_usd: float = 0.0
    disk: DiskRoom | None = None  # after a full disk, where it is local: the room there now

    def current(self, name: str) -> Any:
        """The job's value of one of JOB_KEYS, which a retry's change is compared with."""
        values = {
            "timeout": self.timeout,
            "flavor": self.flavor,
            "dataset_mapping": self.dataset_mapping,
            "max_cost_usd": self.max_cost_usd,
        }
        return values[name]


@dataclass(frozen=True)
class Decision:
    retry: bool
    message: str
    fix: str | None = None
    delay_s: float = 0.0
    # A retry: the changes it applies. A refusal whose fix is one known change (a larger cap): that change.
    changes: dict[str, Any] = field(default_factory=dict)


def decide(
    history: list[AttemptFacts],
    hyperparameters: dict[str, Any],
    changes: dict[str, Any] | None,
    *,
    automatic: bool = False,
    job: JobFacts | None = None,
) -> Decision:
    """May the run start another attempt? `history` is oldest first and its last entry ended; `job` is what the
    decision weighs of the job itself (JobFacts; none known: nothing to compare with or name)."""
    job = job or JobFacts()
    reason = history[-1].reason
    if reason is None:
        return Decision(False, "The latest attempt has not ended yet.", "Wait for it, or cancel it first.")
    settled = _settled(reason, changes, automatic, job)
    if settled is not None:
        return settled
    merged = dict(changes or {})
    asked = _Asked(reason, merged, _real_changes(merged, hyperparameters, job), hyperparameters, automatic, job)
    return _weigh_changes(asked) or _spend_budget(history, asked)


@dataclass(frozen=True)
class _Asked:
    """A retry asked for after an attempt ended: why it ended, and the changes (`real`: those that change a value)."""

    reason: R
    changes: dict[str, Any]
    real: list[str]
    hyperparameters: dict[str, Any]
    automatic: bool
    job: JobFacts


def _settled(reason: R, changes: dict[str, Any] | None, automatic: bool, job: JobFacts) -> Decision | None:
    """The ends whose decision no change alters: a success, a cancel, a cause retrying never fixes."""
    if reason is R.SUCCEEDED:
        source = f'"{job.job_id}"' if job.job_id else "job_id"
        return Decision(
            False,
            "The job already succeeded; there is nothing to retry.",
            f"A new job trains it further: submit with init_from={source} (next_steps writes the whole call).",
        )
    if reason is R.CANCELLED:
        if automatic:
            return Decision(False, "It was cancelled on request; automatic retries leave it stopped.")
        return Decision(
            True, "Resuming the cancelled job from its last committed checkpoint.", changes=dict(changes or {})
        )
    if reason in NEVER:
        return Decision(False, f"Not retried: {reason.value} does not go away by trying again.", NEVER[reason])
    return None


def _weigh_changes(asked: _Asked) -> Decision | None:
    """The changes weighed before any budget: a no-op is refused, a fix that addresses the cause is retried
    (so a refusal's fix is never a dead end); a cap, a full disk and a diverged loss decide here too."""
    if asked.changes and not asked.real:
        return Decision(
            False,
            "Not retried: the changes change nothing (every value equals the current one).",
            "Change a value that addresses the cause, or retry without changes."
            if asked.reason is not R.DIVERGED
            else diverged_fix(asked.hyperparameters, asked.job),
        )
    if asked.reason is R.BUDGET:
        return _after_budget(asked.changes, asked.automatic, asked.job)
    if asked.reason is R.DISK_FULL and not _addresses(R.DISK_FULL, asked.changes, asked.hyperparameters, asked.job):
        refused = _still_full(asked.job, asked.automatic)
        if refused is not None:
            return refused
    if asked.reason is R.DIVERGED and not asked.real:
        return Decision(
            False,
            "Not retried: the loss became NaN or infinite, and the same config would diverge again.",
            diverged_fix(asked.hyperparameters, asked.job),
        )
    if asked.real and _addresses(asked.reason, asked.changes, asked.hyperparameters, asked.job):
        return Decision(
            True, f"Retrying after {asked.reason.value} with changes to {', '.join(asked.real)}.", changes=asked.changes
        )
    return None


def _spend_budget(history: list[AttemptFacts], asked: _Asked) -> Decision:
    """A retry from the reason's budget, unless it is spent, the same config keeps failing (storm), a timed-out
    run made no progress, or an OOM would meet the same memory shape (automatic retries get a proposed one)."""
    budget = BUDGETS.get(asked.reason)
    if budget is None:
        return Decision(
            False,
            f"Not retried automatically: the cause ({asked.reason.value}) is unknown.",
            "Read the log (logs) and the receipt (inspect); a retry with changes that set the value that fixes "
            "it runs: any real change is retried.",
        )
    used = _used(history, asked.reason)
    if used >= budget.retries:
        return Decision(
            False,
            f"The retry budget for {asked.reason.value} is spent ({used} of {budget.retries}).",
            "Look at why it keeps happening (inspect, logs); "
            + _REMEDY.get(asked.reason, "then retry with changes=..."),
        )
    if budget.charged and not asked.real and _storm(history):
        return Decision(
            False,
            f"The same config failed twice with {asked.reason.value}: a retry storm is not progress.",
            "Change the config (retry with changes=...) or fix the cause first.",
        )
    if asked.reason is R.TIMEOUT and not _advanced(history[-1]):
        return Decision(
            False,
            "The last attempt timed out without advancing a step; resuming would time out again.",
            "Give a longer timeout (changes={'timeout': '4h'}) or make steps cheaper.",
        )
    if asked.reason is R.OOM and not _changes_memory_shape(asked.changes, asked.hyperparameters):
        proposal = propose_memory_change(asked.hyperparameters, asked.job.ran_with)
        if not asked.automatic:
            return Decision(
                False,
                "Not retried: the same memory shape would run out of memory again.",
                f"retry with changes={proposal} (or shorter max_length, peft, a bigger flavor).",
            )
        asked.changes.update(proposal)
    delay = budget.backoff_s * (2**used)
    return Decision(
        True,
        f"Retrying after {asked.reason.value} ({used + 1} of {budget.retries}).",
        delay_s=delay,
        changes=asked.changes,
    )


def _still_full(job: JobFacts, automatic: bool) -> Decision | None:
    """After a full disk, without a change that needs less of it: refused while the disk still lacks the room the
    next checkpoint needs (saying exactly how much to free, where), or automatically where that is not known; None:
    the room is back, or a retry by hand after space was freed, which the budget decides."""
    disk = job.disk
    if disk is not None and disk.needed_bytes is not None and disk.free_bytes < disk.needed_bytes:
        return Decision(
            False,
            f"Not retried: {disk.path} still has only {_size(disk.free_bytes)} free, and the next checkpoint needs "
            f"about {_size(disk.needed_bytes)}.",
            f"Free at least {_size(disk.needed_bytes - disk.free_bytes)} on the disk holding {disk.path} (delete old "
            "checkpoints or other runs' outputs, clear the Hugging Face cache) or set save_total_limit lower, then "
            "retry it once.",
        )
    if automatic and (disk is None or disk.needed_bytes is None):
        where = f" ({disk.path}: {_size(disk.free_bytes)} free now)" if disk else ""
        return Decision(
            False,
            f"Not retried automatically: the disk filled up{where}, and nothing says it has room again.",
            "Free space (delete old checkpoints, set save_total_limit, clear the Hugging Face cache) or choose a "
            "flavor with a bigger disk, then retry it once by hand.",
        )
    return None


def _size(n: int) -> str:
    """Bytes as a person reads them (decimal units, as disk tools print them)."""
    value, unit = float(n), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            break
        value /= 1000
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"


def _after_budget(changes: dict[str, Any], automatic: bool, job: JobFacts) -> Decision:
    """A spending cap stopped it: its budget of automatic retries is 0; by hand, it resumes while under its cap
    (the daily budget stopped it, and dispatch checks that one again) or with a larger cap in the changes."""
    if automatic:
        return Decision(False, "Stopped by a spending cap: automatic retries never spend past one.")
    spent = job.spent_usd
    limit = changes.get("max_cost_usd", job.max_cost_usd)
    if limit is not None and reached(spent, float(limit)):
        target = f'job_id="{job.job_id}", ' if job.job_id else ""
        larger = {"max_cost_usd": raise_cap_to(spent, float(limit))}
        return Decision(
            False,
            f"Not retried: it has spent {usd(spent)} of its max_cost_usd {usd(float(limit))}; another attempt would "
            "be stopped at once.",
            f"retry({target}changes={larger!r}) resumes it from its last committed checkpoint with a larger cap.",
            changes=larger,
        )
    under = f" with max_cost_usd {usd(float(limit))}" if limit is not None else ""
    return Decision(True, f"Resuming after budget from the last committed checkpoint{under}.", changes=changes)


def diverged_fix(hyperparameters: dict[str, Any], job: JobFacts) -> str:
    """The exact retry a diverged run needs: a learning rate ten times lower (job.learning_rate is
    the one it trained with, defaults included), or the method's default for one beyond any sense
    (1 and up), resumed from its last committed checkpoint."""
    lower, why = diverged_learning_rate(hyperparameters, job)
    target = f'job_id="{job.job_id}", ' if job.job_id else ""
    return (
        f"retry({target}changes={{'learning_rate': {lower!r}}}) resumes from the last committed checkpoint at a "
        f"learning rate {why}; adding max_grad_norm=1.0 (gradient clipping) or warmup_steps=0.1 also steadies a "
        "run that diverges. If the last checkpoint was already going bad, submit a new job with that learning rate."
    )


def diverged_learning_rate(hyperparameters: dict[str, Any], job: JobFacts) -> tuple[float, str]:
    """(the learning rate a diverged run retries with, why that one): ten times lower, or the method's
    default for one beyond any sense (1 and up)."""
    current = _number(hyperparameters.get("learning_rate")) or _number(job.learning_rate)
    if current is not None and current < 1:
        return float(f"{current / 10:.3g}"), f"ten times lower than {current!r}"
    method = job.method or "sft"
    return float(method_spec(method).defaults["learning_rate"]), f"{method}'s default"


def propose_memory_change(hyperparameters: dict[str, Any], ran_with: dict[str, Any] | None = None) -> dict[str, Any]:
    """Halve the micro-batch and double accumulation (same effective batch); else checkpoint activations.
    `ran_with`: the training_args the attempt ran with (what preflight chose for speed included: its split)."""
    shape = {**hyperparameters, **(ran_with or {})}
    batch = int(shape.get("per_device_train_batch_size", 2))
    if batch > 1:
        accumulation = int(shape.get("gradient_accumulation_steps", 1))
        return {"per_device_train_batch_size": batch // 2, "gradient_accumulation_steps": accumulation * 2}
    if shape.get("gradient_checkpointing") is False:
        return {"gradient_checkpointing": True}
    max_length = int(shape.get("max_length", 1024))
    return {"max_length": max(128, max_length // 2)}


_REMEDY = {
    R.TIMEOUT: "a longer timeout or a faster config (changes={'timeout': '4h'}, fewer max_steps) is still retried.",
    R.OOM: "a new memory shape (changes={'per_device_train_batch_size': 1}, or a flavor) is still retried.",
    R.DISK_FULL: "free space on the disk first; a flavor with a bigger disk or a smaller save_total_limit is still "
    "retried.",
}


def _real_changes(changes: dict[str, Any], hyperparameters: dict[str, Any], job: JobFacts) -> list[str]:
    """The names whose proposed value differs from the current one."""
    real = []
    for name, value in changes.items():
        if name == "timeout":
            differs = parse_duration(value) != job.timeout
        elif name in JOB_KEYS:
            differs = value != job.current(name)
        else:
            differs = value != hyperparameters.get(name)
        if differs:
            real.append(name)
    return real


def _addresses(reason: R, changes: dict[str, Any], hyperparameters: dict[str, Any], job: JobFacts) -> bool:
    """Does a real change address the cause, so that neither the budget nor the storm guard should stop it?"""
    if reason in (R.UNKNOWN, R.DIVERGED):
        return True
    if reason is R.OOM:
        return _changes_memory_shape(changes, hyperparameters)
    if reason is R.TIMEOUT:
        return any(_faster_or_longer(name, value, hyperparameters, job) for name, value in changes.items())
    if reason is R.DISK_FULL:  # another machine (a bigger disk), or fewer checkpoints kept on this one
        return "flavor" in changes or "save_total_limit" in changes
    return False


def _faster_or_longer(name: str, value: Any, hyperparameters: dict[str, Any], job: JobFacts) -> bool:
    """A changed value that gives a timed-out run more time, or makes it need less."""
    if name == "flavor":  # another machine: the caller's judgement that it is faster
        return bool(value != job.flavor)
    if name == "timeout":
        return job.timeout is None or (parse_duration(value) or 0) > job.timeout
    if name == "gradient_checkpointing":
        return value is False and hyperparameters.get(name) is not False
    if name in SHORTER_KEYS:
        new, current = _number(value), _number(hyperparameters.get(name))
        if new is None:
            return False
        # An epoch-bound run that gets a max_steps becomes shorter; other unknown current values cannot be compared.
        return new < current if current is not None else name == "max_steps"
    return False


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _changes_memory_shape(changes: dict[str, Any], current: dict[str, Any]) -> bool:
    if "flavor" in changes:
        return True
    return any(k in changes and changes[k] != current.get(k) for k in MEMORY_SHAPE_KEYS)


def _used(history: list[AttemptFacts], reason: R) -> int:
    """Retries already spent on `reason`: attempts that followed an attempt ending that way."""
    return sum(1 for before in history[:-1] if before.reason is reason)


def _storm(history: list[AttemptFacts]) -> bool:
    if len(history) < 2:
        return False
    a, b = history[-2], history[-1]
    return a.reason is b.reason and a.config_sha256 == b.config_sha256


def _advanced(attempt: AttemptFacts) -> bool:
    if attempt.last_step is None:
        return False
    return attempt.last_step > (attempt.start_step or 0)
