"""Why did an attempt end? Pure rules, in order of trust:

1. what jobtrail itself did (a cancel it sent, a timeout it enforced);
2. the job's own termination event (its `unknown` is refined by the log when the log knows more; a
   worker killed by a signal, as a job of many workers' launcher reports it, yields to OOM lines);
3. the exit code or signal, corrected by log evidence (a SIGKILL with OOM lines is oom);
4. the log: first by cause, the last exception in the tail (its type, module, message and the
   frames that raised it, see `tracebacks`), then by patterns, newest line first.

Before or after training is read from the log itself: jobtrail's own events (`step`, a
`committed` checkpoint, `metrics`, the final model) or, in logs written without them, the
trainer's output (`{'loss': ...}`, its progress bar, "Saving model checkpoint to", the
`train_runtime` summary). A 401/403 before any checkpoint is an auth problem; the same refusal
once a checkpoint is committed or training has finished is a hub_error: the work is kept and
only the push needs repeating.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass
from typing import Any

from jobtrail.models import ExitRecord, TerminationReason as R
from jobtrail.outcomes import causes, events
from jobtrail.outcomes.causes import CONFIG, DATA, DEPENDENCY, HUB_FAILED, OOM, REFUSED, TRANSIENT
from jobtrail.outcomes.tracebacks import since_progress, strip_prefix

TAIL_LINES = 400  # how much of a log's end the causes and patterns look at


@dataclass(frozen=True)
class Verdict:
    reason: R
    message: str
    evidence: str | None = None  # the log line (or fact) that decided it


@dataclass(frozen=True)
class LogRule:
    reason: R
    message: str
    pattern: re.Pattern[str]


def _rule(reason: R, message: str, *alternatives: str, ignore_case: bool = True) -> LogRule:
    return LogRule(reason, message, re.compile("|".join(alternatives), re.IGNORECASE if ignore_case else 0))


# Scanning the tail from the newest line, the first line that matches any rule decides; within
# a line, earlier rules win (so a 403 while pushing is hub_error before it can be auth_error,
# and a job timeout before a read timeout).
LOG_RULES: list[LogRule] = [
    _rule(
        R.TIMEOUT, "The job ran past its timeout.", r"Job timed out", r"exceeded (its|the) (timeout|maximum duration)"
    ),
    _rule(
        R.HUB_ERROR,
        HUB_FAILED,
        r"\b40[13]\b.*(/commit/|/preupload/|upload|push)",
        r"Failed to push",
        r"push_to_hub.*(failed|error)",
    ),
    _rule(
        R.OOM,
        OOM,
        r"CUDA out of memory",
        r"OutOfMemoryError",
        r"Cannot allocate memory",
        r"can't allocate memory",
        r"oom-kill",
        r"out of memory: Killed process",
    ),
    _rule(
        R.AUTH_ERROR,
        REFUSED,
        r"GatedRepoError",
        r"Cannot access gated repo",
        r"not in the authorized list",
        r"Invalid credentials in Authorization header",
        r"\b401\b.*Unauthorized",
        r"LocalTokenNotFoundError",
        r"Token is required",
    ),
    # Case matters for the next two: their words are Python's and the installers' exact spelling.
    _rule(
        R.DEPENDENCY_ERROR,
        DEPENDENCY,
        r"ModuleNotFoundError",
        r"ImportError",
        r"No matching distribution",
        r"Failed to build",
        r"No solution found when resolving",
        ignore_case=False,
    ),
    _rule(
        R.CONFIG_ERROR,
        CONFIG,
        r"got an unexpected keyword argument",
        r"eval_strategy.*eval_dataset",
        r"doesn't support bf16",
        r"chat_template is not set",
        r"Cannot use chat template",
        ignore_case=False,
    ),
    _rule(
        R.BAD_INPUT,
        DATA,
        r"JSONDecodeError",
        r"DatasetGenerationError",
        r"JSON parse error",
        r"^KeyError: '",
        r"Column '.*' not in the dataset",
    ),
    _rule(
        R.INFRA_TRANSIENT,
        TRANSIENT,
        r"ReadTimeout",
        r"ConnectTimeout",
        r"read operation timed out",
        r"Read timed out",
        r"Connection reset",
        r"ConnectionError",
        r"\b5\d\d Server Error",
        r"Bad Gateway",
        r"Service Unavailable",
        r"Gateway Time-?out",
    ),
]


def classify(
    exit_record: ExitRecord | None,
    termination: dict[str, Any] | None,
    log_tail: list[str],
    *,
    cancel_requested: bool = False,
    lost: bool = False,
) -> Verdict:
    if cancel_requested or (exit_record and exit_record.cancelled):
        return Verdict(R.CANCELLED, "Cancelled on request.")
    if exit_record and exit_record.timed_out:
        return Verdict(R.TIMEOUT, "Stopped at the job's timeout.")
    if lost:
        return Verdict(R.LOST, "The backend no longer knows this attempt and left no exit record.")
    if termination and termination.get("reason") in R.__members__.values():
        told = Verdict(
            R(termination["reason"]),
            str(termination.get("message") or termination["reason"]),
            evidence="termination event",
        )
        # The job could not name the cause; its log may (a library's exception it does not know).
        if told.reason is R.UNKNOWN:
            return _from_log(log_tail) or told
        if isinstance(termination.get("signal"), int):
            # A worker died by a signal (its launcher's account, as a job's own exit by signal): OOM lines say why.
            by_log = _from_log(log_tail)
            return by_log if by_log and by_log.reason is R.OOM else told
        return told
    if exit_record and exit_record.exit_code == 0 and exit_record.signal is None:
        return Verdict(R.SUCCEEDED, "Exited 0.")
    by_log = _from_log(log_tail)
    signum = _signal_of(exit_record)
    if signum is not None:
        return _from_signal(signum, by_log)
    if by_log:
        return by_log
    if exit_record is None:
        return Verdict(R.UNKNOWN, "No exit status and no recognisable cause in the log.")
    return Verdict(R.UNKNOWN, f"Exited with code {exit_record.exit_code} and no recognisable cause in the log.")


def explain(log_text: str, exit_code: int | None = None, signal: int | None = None) -> Verdict:
    """Classify any log (a job's, or one pasted from elsewhere), as `jobtrail explain` does."""
    lines = log_text.splitlines()
    termination = events.termination_event([e for line in lines if (e := events.parse_line(line))])
    exit_record = None
    if exit_code is not None or signal is not None:
        exit_record = ExitRecord(exit_code=exit_code, signal=signal, ended_at=0.0)
    return classify(exit_record, termination, lines[-TAIL_LINES:])


def _from_signal(signum: int, by_log: Verdict | None) -> Verdict:
    name = _signal_name(signum)
    if by_log and by_log.reason is R.OOM:
        return by_log
    if signum in (signals.SIGKILL, signals.SIGTERM, signals.SIGINT, signals.SIGHUP):
        # Without OOM evidence in the log, a kill jobtrail did not send is the machine taking
        # the job away (preemption, eviction, a reboot), which a resume can recover from.
        return Verdict(
            R.PREEMPTED,
            f"Stopped by {name}, which jobtrail did not send, with no sign of running out of memory.",
            evidence=name,
        )
    return by_log or Verdict(R.UNKNOWN, f"Died by {name}.", evidence=name)


def _signal_of(exit_record: ExitRecord | None) -> int | None:
    if exit_record is None:
        return None
    if exit_record.signal is not None:
        return exit_record.signal
    # Shells and containers report death by signal N as exit code 128 + N (137 = SIGKILL).
    code = exit_record.exit_code
    return code - 128 if code is not None and 128 < code < 160 else None


def _from_cause(lines: list[str]) -> Verdict | None:
    found = causes.find(lines)
    return Verdict(found[0].reason, found[0].message, evidence=found[1].strip()[:500]) if found else None


def _from_log(lines: list[str]) -> Verdict | None:
    # A pattern seen before training went on did not end the job (an OOM that
    # auto_find_batch_size recovered from, a download that was retried).
    return _from_cause(lines) or _from_patterns(since_progress(lines))


def _from_patterns(lines: list[str]) -> Verdict | None:
    for line in reversed(lines):
        for rule in LOG_RULES:
            if rule.pattern.search(strip_prefix(line)):  # `^KeyError` holds under torchrun's `[rank0]: ` too
                return Verdict(rule.reason, rule.message, evidence=line.strip()[:500])
    return None


def _signal_name(signum: int) -> str:
    try:
        return signals.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
