"""Why did an attempt end? Pure rules, in order of trust:

1. what jobtrail itself did (a cancel it sent, a timeout it enforced);
2. the job's own termination event (its `unknown` is refined by the log when the log knows more; a
   worker killed by a signal, as a job of many workers' launcher reports it, yields to OOM lines);
3. what a scheduler says it did (SLURM's time limit, a preemption): the processes' noise while it did it
   decides nothing;
4. the kernel's OOM killer, in its own words or as a surviving parent's report of a child killed by SIGKILL
   (a launcher's `exitcode: -9`, a shell's `Killed`, exit 247): one process taken, not the machine;
5. the log's fatal exception (see `causes`: its chain, followed to the root, by type, module, frames and
   the libraries' own words in `families`), unless training went on after it;
6. the exit code or signal of the job itself (`exits.decode`): a SIGKILL or SIGTERM that jobtrail did not
   send and that no process of the job outlived is the machine taken away (preempted) unless OOM lines say why;
   without one, a launcher's report of the signal it was itself sent (SIGHUP: its terminal closed; SIGINT: Ctrl-C;
   another signal after a process of the job had failed: that failure);
7. patterns in loose lines, newest first (a metric logged NaN decides only if no later line logs it finite);
8. in a log without a traceback, an exception a program caught and reported within a line (`The error was
   ValueError('...')`), read by the rules of step 5;
9. a best guess from the type of an exception no rule reads, raised before training (`priors`), saying so;
10. a collective broken by a peer that went away or the network, when nothing else in the log failed (every rank
   reports it when any rank dies, so it names the cause only alone);
11. unknown, saying what it saw: the exit decoded, a child's exit, the last exception.

A CUDA kernel's illegal memory access reads as an install that does not fit the machine only before any training
step: after steps ran on the same kernels it is unknown, saying why.

Lines are read without their prefixes (`lines.clean`: ranks, timestamps, colours). Before or after
training is read from the log itself: jobtrail's own events (`step`, a `committed` checkpoint, `metrics`,
the final model) or, in logs written without them, the trainer's output (`{'loss': ...}`, its progress
bar, "Saving model checkpoint to", the `train_runtime` summary). A 401/403 before any checkpoint is an
auth problem; the same refusal once a checkpoint is committed or training has finished is a hub_error:
the work is kept and only the push needs repeating.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass
from typing import Any

from jobtrail.models import ExitRecord, TerminationReason as R
from jobtrail.outcomes import causes, events, exits, families, generic, libraries, metrics, priors
from jobtrail.outcomes.causes import OOM
from jobtrail.outcomes.lines import clean, split
from jobtrail.outcomes.log_rules import LOG_RULES
from jobtrail.outcomes.tracebacks import (
    Progress,
    finished_at,
    importing,
    last_chain,
    progress,
    reported,
    stepped,
    went_on,
)

TAIL_LINES = 400  # how much of a log's end the causes and patterns look at


@dataclass(frozen=True)
class Diagnosis:
    """Why an attempt ended, read from its log and exit: the reason, what to tell the agent, the deciding line."""

    reason: R
    message: str
    evidence: str | None = None  # the log line (or fact) that decided it


def classify(
    exit_record: ExitRecord | None,
    termination: dict[str, Any] | None,
    log_tail: list[str],
    *,
    cancel_requested: bool = False,
    lost: bool = False,
) -> Diagnosis:
    if cancel_requested or (exit_record and exit_record.cancelled):
        return Diagnosis(R.CANCELLED, "Cancelled on request.")
    if exit_record and exit_record.timed_out:
        return Diagnosis(R.TIMEOUT, "Stopped at the job's timeout.")
    reported = termination is not None and termination.get("reason") in R.__members__.values()
    # A job that reported how it ended decided its outcome before its supervisor (or the server) vanished: its
    # own termination event says what happened, and `lost` is only for an attempt that left no word at all.
    if lost and not reported:
        return Diagnosis(R.LOST, "The backend no longer knows this attempt and left no exit record.")
    if termination is not None and reported:
        return _from_termination(termination, log_tail)
    status = exits.decode(exit_record.exit_code, exit_record.signal) if exit_record else exits.Exit(None, None)
    if status.code == 0 and status.signal is None:
        return Diagnosis(R.SUCCEEDED, "Exited 0.")
    reports = exits.read(log_tail)
    verdict = (
        _from_scheduler(reports)
        or _from_killed_child(reports, status)
        or _from_cause(log_tail)
        or _from_import(log_tail)
        or _from_launcher_signal(reports, status, log_tail)
        or _from_kill(status, log_tail)
        or _from_patterns(log_tail)
        or _from_host_memory(log_tail)
        or _from_reported(log_tail)
        or _from_prior(status, reports, log_tail)
        or _from_peer_lost(log_tail)
        or _failed_uploading(status, reports, log_tail)
        or _unrecognised(status, reports, log_tail)
    )
    return _pushed_after_training(_crashed_after_steps(_waited_for_data(verdict, log_tail), log_tail), log_tail)


def explain(log_text: str, exit_code: int | None = None, signal: int | None = None) -> Diagnosis:
    """Classify any log (a job's, or one pasted from elsewhere), as `jobtrail explain` does."""
    lines = split(log_text)
    termination = events.termination_event([e for line in lines if (e := events.parse_line(line))])
    exit_record = None
    if exit_code is not None or signal is not None:
        exit_record = ExitRecord(exit_code=exit_code, signal=signal, ended_at=0.0)
    return classify(exit_record, termination, lines[-TAIL_LINES:])


# A labelled progress bar of data preparation (`Running tokenizer on dataset:  9%|`, `Map (num_proc=8): 40%|`,
# `Filter:`, `Grouping texts in chunks of 2048:`), as datasets and the trainers' scripts label them.
_PREPARING = re.compile(
    r"^\s*[^|%]*(?:tokeniz|\bMap\b|\bmap\b|Filter|preprocess|Preprocess|format|Format|[Pp]ack|Group|[Ee]ncod)"
    r"[^|%]*:\s*\d{1,3}%\|"
)
_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(?P<ms>\d+)")


def _waited_for_data(verdict: Diagnosis, lines: list[str]) -> Diagnosis:
    """A collective that timed out before any training step while a rank was still preparing data: the other ranks
    waited at the barrier for it. That is no network hiccup: a retry does the same work under the same limit and
    times out again, so it is the collective's timeout that was too short for the data preparation."""
    said = clean(verdict.evidence or "")
    timed_out = verdict.reason is R.INFRA_TRANSIENT and families.COLLECTIVE_TIMEOUT.pattern.search(said) is not None
    if not timed_out or progress(lines) > Progress.NONE:
        return verdict
    if not any(_PREPARING.search(part) for line in lines for part in clean(line).split("\r")):
        return verdict
    limit = next((int(m["ms"]) for line in lines if (m := _TIMEOUT_MS.search(line))), None)
    waited = f" ({limit // 60000} minutes{', the default' if limit == 1_800_000 else ''})" if limit else ""
    return Diagnosis(
        R.TIMEOUT,
        f"A collective between GPUs hit its timeout{waited} before the first training step, while a rank was still "
        "preparing the data (tokenizing, mapping): the other ranks waited for it. A retry would wait the same way: "
        "preprocess the data before launching (and cache it), or raise the timeout (ddp_timeout, "
        "init_process_group(timeout=...)).",
        evidence=verdict.evidence,
    )


def _crashed_after_steps(verdict: Diagnosis, lines: list[str]) -> Diagnosis:
    """A CUDA kernel's illegal memory access after training steps had run on the same kernels: a build that does not
    fit the GPU, torch or CUDA (what the access means at the start of a run) fails at its first call, not after hours.
    A kernel's bug for some input, or the GPU, is as likely as anything the log can show: unknown, saying so."""
    if not verdict.evidence or not families.ILLEGAL_ACCESS.pattern.search(verdict.evidence):
        return verdict
    if not stepped(lines[: _at(lines, verdict.evidence)]):
        return verdict
    return Diagnosis(
        R.UNKNOWN,
        "A CUDA kernel crashed (illegal memory access) after training steps had run: not an install that does not "
        "fit the machine (that fails at the first call). A kernel's bug for some input (a sequence length, a batch's "
        "shape) or a fault of the GPU; the log does not say which. CUDA_LAUNCH_BLOCKING=1 names the kernel; resume "
        "from the last checkpoint to see whether it recurs at the same step, and try another GPU if it does not.",
        evidence=verdict.evidence,
    )


def _at(lines: list[str], evidence: str) -> int:
    """The index of the newest line the evidence was taken from (as `Diagnosis.evidence` keeps it), else 0."""
    return next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()[:500] == evidence), 0)


def _pushed_after_training(verdict: Diagnosis, lines: list[str]) -> Diagnosis:
    """A server's failure or a refusal logged once training had finished and the job had begun uploading its results:
    the push failed (any HTTP status, to the Hub or any other registry), not the training, whose files are kept."""
    if verdict.reason not in (R.INFRA_TRANSIENT, R.AUTH_ERROR) or not verdict.evidence:
        return verdict
    at = _at(lines, verdict.evidence)
    finished = finished_at(lines[:at])
    if finished is None or not any(generic.UPLOADING.search(clean(line)) for line in lines[finished : at + 1]):
        return verdict
    return Diagnosis(
        R.HUB_ERROR,
        "Training finished, then uploading its results failed (a server error or a refusal while pushing to the Hub "
        "or another registry): the trained files are kept, so only the upload needs repeating.",
        evidence=verdict.evidence,
    )


def _failed_uploading(status: exits.Exit, reports: list[exits.Report], lines: list[str]) -> Diagnosis | None:
    """Training finished and the job then said it was uploading its results, or it was exporting a trained model for
    them (converting it to GGUF, merging an adapter into it: a model that exists), and it failed in a way no rule reads
    (a traceback the paste cut short, an exception no rule knows), with nothing of training after: the upload or the
    export is what was running, and the trained files are kept."""
    finished = finished_at(lines)
    uploads = range(len(lines) if finished is None else finished, len(lines))
    upload = next((i for i in uploads if generic.UPLOADING.search(clean(lines[i]))), None)
    export = next((i for i, line in enumerate(lines) if generic.EXPORTING.search(clean(line))), None)
    began = upload if upload is not None else export
    if began is None or progress(lines[began + 1 :]) > Progress.NONE:
        return None
    seen, evidence = _seen(status, reports, lines)
    said = f" ({'; '.join(seen)})" if seen else ""
    doing, redo = (
        ("Training finished and the job was uploading its results", "the upload (push_to_hub / upload_folder)")
        if upload is not None
        else (
            "The job was exporting a trained model for its upload (a GGUF conversion, a merge)",
            "the export and upload (the GGUF or merged save and push; an exporter's failure is often fixed by updating "
            "it)",
        )
    )
    return Diagnosis(
        R.HUB_ERROR,
        f"{doing} when it failed{said}; no rule reads the failure itself, but the trained files are kept: repeat only "
        f"{redo}, and read its error if it fails again.",
        evidence=evidence or lines[began].strip()[:500],
    )


def _from_termination(termination: dict[str, Any], log_tail: list[str]) -> Diagnosis:
    told = Diagnosis(
        R(termination["reason"]), str(termination.get("message") or termination["reason"]), "termination event"
    )
    # The job could not name the cause; its log may (a library's exception it does not know).
    if told.reason is R.UNKNOWN:
        return (
            _from_log(log_tail)
            or _from_import(log_tail)
            or _from_prior(exits.Exit(None, None), [], log_tail)
            or _from_peer_lost(log_tail)
            or told
        )
    if isinstance(termination.get("signal"), int):
        # A worker died by a signal (its launcher's account, as a job's own exit by signal): OOM lines say why.
        by_log = _from_log(log_tail)
        return by_log if by_log and by_log.reason is R.OOM else told
    return told


def _from_scheduler(reports: list[exits.Report]) -> Diagnosis | None:
    """What a scheduler says it did outranks what the processes printed while it did it (SLURM's SIGTERM at the
    time limit leaves tracebacks and 'Terminated' tasks behind)."""
    for kind, reason, message in _SCHEDULER:
        if report := next((r for r in reports if r.kind == kind), None):
            return Diagnosis(reason, message, evidence=report.line[:500])
    if evicted := next((r for r in reports if r.kind == "evicted" and r.disk), None):
        return Diagnosis(R.DISK_FULL, families.disk_message([evicted.line]), evidence=evicted.line[:500])
    return None


_SCHEDULER = [
    (
        "time_limit",
        R.TIMEOUT,
        "The scheduler or platform stopped the job at its time limit (a batch scheduler's wall time, a serverless "
        "function's or a CI runner's timeout, a cloud job's maximum runtime): raise the limit, or resume from the last "
        "checkpoint.",
    ),
    (
        "preempted",
        R.PREEMPTED,
        "The scheduler or platform took the machine back (a preemption, a spot VM shut down, a notebook's runtime "
        "disconnected, a node failure): resume from the last checkpoint.",
    ),
    (
        "cancelled",
        R.CANCELLED,
        "The scheduler reports the job cancelled (not by jobtrail). Where its banner gives no reason (`CANCELLED AT "
        "<time> ***`) it does not say who: scancel and a preemption with a grace time print the same line, so if this "
        "cluster preempts jobs, resume from the last checkpoint.",
    ),
]


def _from_killed_child(reports: list[exits.Report], status: exits.Exit) -> Diagnosis | None:
    """The kernel's OOM killer at work, in its own words or as the report of a parent that outlived its child.
    It comes before the tracebacks: the other ranks' errors after a rank is killed are only its echo."""
    if oom := next((r for r in reports if r.kind == "oom"), None):
        return Diagnosis(R.OOM, OOM, evidence=oom.line[:500])
    child = exits.child_exit(reports)
    if status.relayed and status.signal == signals.SIGKILL and not (child and child.exit):
        child = exits.Report("child", f"exit code {status.code}", status)
    if child and child.exit and child.exit.signal == signals.SIGKILL:
        # A launcher or shell that reports its child killed was alive: one process was taken, not the machine.
        # The kernel's OOM killer takes the largest process; a preemption takes them all.
        return Diagnosis(
            R.OOM,
            f"A process of the job was killed by SIGKILL ({child.exit.words}) while its launcher lived on: the "
            "kernel's OOM killer (host RAM, not GPU memory) is what kills one process, a preemption takes the whole "
            "machine. Use less CPU memory (low_cpu_mem_usage, smaller dataset maps, fewer dataloader workers) or "
            "more RAM.",
            evidence=child.line[:500],
        )
    return None


def _from_launcher_signal(reports: list[exits.Report], status: exits.Exit, lines: list[str]) -> Diagnosis | None:
    """The launcher says which signal it was itself sent (torch elastic's SignalException): the job was stopped from
    outside, as by a signal to the job, with the sender told apart by the signal. An exit status's own signal decides
    first (`_from_kill`)."""
    received = next((r for r in reports if r.kind == "received" and r.exit and r.exit.signal), None)
    if status.signal is not None or received is None or received.exit is None:
        return None
    by_log = _from_patterns(lines)
    if by_log and by_log.reason is R.OOM:
        return by_log
    signum, evidence = received.exit.signal, received.line[:500]
    if signum == signals.SIGHUP:
        # The terminal or SSH session the launcher ran in closed: nothing was wrong with the job, and it resumes.
        return Diagnosis(
            R.PREEMPTED,
            "The launcher got SIGHUP: the terminal or SSH session that started it closed. Run it detached (nohup "
            "and disown, tmux, or a scheduler) so that a disconnect does not end it, and resume from its checkpoint.",
            evidence=evidence,
        )
    if signum == signals.SIGINT:
        # Ctrl-C: a person stopped it on purpose, which is no failure to retry.
        return Diagnosis(R.CANCELLED, "The launcher got SIGINT (Ctrl-C): someone stopped the job.", evidence=evidence)
    if failed_first := _failed_before(received, lines):
        return failed_first
    return Diagnosis(
        R.PREEMPTED,
        f"The launcher was sent {exits.signal_name(signum or 0)} from outside the job (the platform or a scheduler "
        "taking the machine back, or someone stopping it), with no sign of running out of memory.",
        evidence=evidence,
    )


def _failed_before(received: exits.Report, lines: list[str]) -> Diagnosis | None:
    """A launcher of many components (a trainer beside an inference server and an orchestrator) stops the rest with
    SIGTERM when one of them fails: an exception printed before the launcher got its signal is why it was sent, and
    no rule knew it (`_from_cause` runs first). Best guessed from its type, else unknown, never a preemption."""
    index = next((i for i, line in enumerate(lines) if line.strip() == received.line), len(lines))
    earlier = lines[:index]
    failed = priors.raised(earlier)
    if failed is None:
        return None
    said = f"the launcher was then sent {exits.signal_name(received.exit.signal or 0) if received.exit else 'a signal'}"
    return _from_prior(exits.Exit(None, None), [], earlier, also=said) or Diagnosis(
        R.UNKNOWN,
        f"A process of the job failed ({failed.line[:300]}) and then {said}: the launcher stopping the rest after that "
        "failure, not a preemption. No rule recognises the failure itself.",
        evidence=failed.line[:500],
    )


def _from_kill(status: exits.Exit, lines: list[str]) -> Diagnosis | None:
    """The job itself died by a signal (no process of it left to say more)."""
    signum = status.signal
    if signum is None:
        return None
    by_log = _from_patterns(lines)
    if by_log and by_log.reason is R.OOM:
        return by_log
    if signum in (signals.SIGKILL, signals.SIGTERM, signals.SIGINT, signals.SIGHUP):
        # Without OOM evidence or a surviving parent's report, a kill jobtrail did not send is the machine
        # taking the job away (preemption, eviction, a reboot), which a resume can recover from.
        return Diagnosis(
            R.PREEMPTED,
            f"Stopped by {exits.signal_name(signum)} ({status.words}), which jobtrail did not send, with no sign of "
            "running out of memory and no process of the job left to report it.",
            evidence=exits.signal_name(signum),
        )
    return by_log or Diagnosis(
        R.UNKNOWN, f"Died by {exits.signal_name(signum)} ({status.words}).", evidence=exits.signal_name(signum)
    )


def _unrecognised(status: exits.Exit, reports: list[exits.Report], lines: list[str]) -> Diagnosis:
    """No rule knows it: say what was seen (the exit decoded, a child's exit, the last exception) all the same."""
    seen, evidence = _seen(status, reports, lines)
    if not seen:
        return Diagnosis(R.UNKNOWN, "No exit status and no recognisable cause in the log.")
    return Diagnosis(R.UNKNOWN, f"No rule recognises this failure; {'; '.join(seen)}.", evidence=evidence)


def _seen(status: exits.Exit, reports: list[exits.Report], lines: list[str]) -> tuple[list[str], str | None]:
    """What the log shows of the end, in words (the exit decoded, a child's exit, the last exception), and the line
    that shows the most."""
    seen = [status.words] if status.code is not None or status.signal is not None else []
    child = exits.child_exit(reports)
    if child and child.exit:
        seen.append(f"a launcher reports its child's {child.exit.words}")
    chain = causes.fatal_chain(lines) or last_chain(lines)
    within = None if chain else priors.raised(lines)
    error = chain[-1].lines[0].strip()[:300] if chain else within.line[:300] if within else None
    if error:
        seen.append(f"the last exception: {error}")
    return seen, error or (child.line[:500] if child else None)


def _from_prior(
    status: exits.Exit, reports: list[exits.Report], lines: list[str], also: str | None = None
) -> Diagnosis | None:
    """No rule reads the failure, but its exception's type most often means one reason (`priors`): that reason, as a
    best guess that says what it rests on and what the log showed."""
    found = priors.guess(lines)
    if found is None:
        return None
    raised, prior = found
    seen, _ = _seen(status, reports, lines)
    shown = "; ".join([*seen, also] if also else seen)
    return Diagnosis(
        prior.reason,
        f"Best guess from the exception's type alone (no rule recognises its words): a {raised.name} raised before "
        f"training most often means {prior.reason.value} ({prior.count} of {prior.total} labelled logs). What the log "
        f"shows: {shown}.",
        evidence=raised.line[:500],
    )


def _from_import(lines: list[str]) -> Diagnosis | None:
    """An exception raised inside installed packages while the job's code imported one, that no rule reads or that
    reads as two packages' APIs out of step: the install (DESIGN.md: import), not anything the job was given (nothing of
    its code has run yet)."""
    chain = causes.fatal_chain(lines)
    if not importing(lines, chain):
        return None
    return Diagnosis(
        R.DEPENDENCY_ERROR,
        "Importing a package failed inside the installed packages' own code, before the job's code ran: their versions "
        "do not fit together (one reads another's version or API as a release it was not written for) or the install "
        "is broken. Install versions that fit together (the failing package's requirements), or reinstall it.",
        evidence=lines[chain[0].index].strip()[:500],
    )


def _from_host_memory(lines: list[str]) -> Diagnosis | None:
    """A notebook kernel that died and restarted with no traceback, the allocator having warned of a huge allocation
    before it: the host's RAM ran out (`generic.KERNEL_DIED`)."""
    died = next((raw for raw in reversed(lines) if generic.KERNEL_DIED.search(clean(raw))), None)
    if died is None or not any(generic.LARGE_ALLOCATION.search(clean(raw)) for raw in lines):
        return None
    return Diagnosis(
        R.OOM,
        "The notebook's kernel died and restarted after a huge allocation: the host's RAM ran out (the GPU's memory "
        "would raise an error instead). Use less CPU memory (a smaller batch or dataset in memory, streaming, "
        "low_cpu_mem_usage) or a runtime with more RAM.",
        evidence=died.strip()[:500],
    )


def _from_peer_lost(lines: list[str]) -> Diagnosis | None:
    """The newest line saying a collective lost a peer or its network, when no other failure explains it: the fatal
    exception, if the log shows one, must be that same report (an exception of another kind is why a peer went away,
    even one no rule reads)."""
    lost = generic.PEER_LOST.pattern
    failed = [error.lines[0] for error in causes.fatal_chain(lines)]
    if not failed and (within := priors.raised(lines)):
        failed = [within.line]
    if failed and not any(lost.search(clean(line)) for line in failed):
        return None
    line = next((raw for raw in reversed(lines) if lost.search(clean(raw))), None)
    return Diagnosis(R.INFRA_TRANSIENT, generic.PEER_LOST.message, evidence=line.strip()[:500]) if line else None


# Readings of a call between packages that does not fit (round 10's API mismatch), which a failure while importing
# leaves to the install: nothing of the job's own code has run yet.
_API_READINGS = {causes.API_MISMATCH, libraries.API_CHANGED}


def _from_cause(lines: list[str]) -> Diagnosis | None:
    found = causes.find(lines)
    if not found:
        return None
    rule, line = found
    if rule.message in _API_READINGS and (imported := _from_import(lines)):
        return imported
    message = families.disk_message(lines) if rule.reason is R.DISK_FULL else rule.message
    return Diagnosis(rule.reason, message, evidence=line.strip()[:500])


def _from_reported(lines: list[str]) -> Diagnosis | None:
    """An exception a program caught and reported within a line of its own words, where the log shows no traceback
    (`The model could not be loaded. The error was ValueError('...')`), read by the rules that read it when raised,
    unless training went on after it."""
    error = None if last_chain(lines) else reported(lines)
    if error is None or went_on(lines[: error.index], lines[error.index + 1 :]):
        return None
    found = causes.read([error], lines)
    return Diagnosis(found[0].reason, found[0].message, evidence=found[1].strip()[:500]) if found else None


def _from_log(lines: list[str]) -> Diagnosis | None:
    return _from_cause(lines) or _from_patterns(lines)


def _from_patterns(lines: list[str]) -> Diagnosis | None:
    """The newest line a rule knows, unless training went on after it (an OOM that auto_find_batch_size recovered
    from, a download that was retried)."""
    for index in range(len(lines) - 1, -1, -1):
        line = clean(lines[index])
        verdict = _pattern_verdict(line, lines)
        if verdict is None:
            continue
        if went_on(lines[:index], lines[index + 1 :]) or _recovered(line, lines[index + 1 :]):
            return None
        return Diagnosis(verdict.reason, verdict.message, evidence=lines[index].strip()[:500])
    return None


def _recovered(line: str, after: list[str]) -> bool:
    """A metric logged NaN, then finite again in a later line (any logger's format, which `went_on` does not read as
    steps): that step was skipped or recovered from, and it is not why the job ended."""
    return bool(metrics.nan_metrics(line) & metrics.finite_metrics(after))


def _pattern_verdict(line: str, lines: list[str]) -> Diagnosis | None:
    if signature := families.match(line):
        message = families.disk_message(lines) if signature.reason is R.DISK_FULL else signature.message
        return Diagnosis(signature.reason, message)
    rule = next((rule for rule in LOG_RULES if rule.pattern.search(line)), None)
    return Diagnosis(rule.reason, rule.message) if rule else None
