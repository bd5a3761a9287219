"""Exit codes decoded, and what launchers, schedulers and the kernel say about a process's end. Pure.

An exit status arrives in many spellings of the same few facts. A shell or container reports death by
signal N as 128 + N (137 = SIGKILL); Python's subprocess and torch's elastic agent report it as -N; a
launcher that passes a child's -9 on through `sys.exit(-9)` leaves its own shell the code 256 - 9 = 247
(DeepSpeed's launcher does). `decode` turns any of them into the signal or the plain code, with words.

The log adds what the exit status cannot: which process died. `read` collects the reports of launchers
(torchrun's `exitcode: -9`, its ChildFailedError summary, accelerate's CalledProcessError, DeepSpeed's
`exits with return code = -9`, a shell's `Killed` (macOS's `Killed: 9`) or zsh's `killed`, even on the line of the
progress bar it interrupted), the signal a launcher was itself sent (torch elastic's SignalException), schedulers
(SLURM's CANCELLED ... DUE TO TIME LIMIT, preemption, node failure and cgroup OOM; Kubernetes' OOMKilled and
evictions), platforms (a serverless function's or a CI runner's time limit, a spot VM's shutdown, a notebook's runtime
dropped, a cluster manager's notice that it is losing nodes to the platform), the kernel's OOM killer, and someone's
Ctrl-C.
A launcher or shell that reports its child killed was itself alive: the kill took one process, not the
machine, which is what the OOM killer does and what a preemption does not.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass, replace

from jobtrail.outcomes.lines import clean


@dataclass(frozen=True)
class Exit:
    """One decoded exit: the signal that ended the process, or its plain exit code."""

    code: int | None
    signal: int | None

    @property
    def relayed(self) -> bool:
        """The code is a parent's report of its child's death by signal (-N, or 256 - N from sys.exit(-N)), so the
        parent outlived the child: a shell's 128 + N or a bare signal says nothing of the kind."""
        return self.signal is not None and self.code is not None and (self.code < 0 or self.code > 128 + 64)

    @property
    def words(self) -> str:
        """'exit 247 = killed by signal 9 (SIGKILL)', 'exit 1', 'killed by signal 15 (SIGTERM)'."""
        killed = f"killed by signal {self.signal} ({signal_name(self.signal)})" if self.signal else ""
        if self.code is None:
            return killed or "no exit status"
        return f"exit {self.code} = {killed}" if killed else f"exit {self.code}"


def decode(code: int | None, signal: int | None = None) -> Exit:
    """The signal behind an exit code, in each convention that encodes one (see the module's docstring)."""
    if signal is not None:
        return Exit(code, signal)
    if code is None:
        return Exit(None, None)
    if code < 0:  # Python's subprocess / torch elastic: -N is death by signal N
        return Exit(code, -code if -code < 65 else None)
    if 128 < code < 128 + 65:  # a shell's 128 + N
        return Exit(code, code - 128)
    # 256 - N: a launcher's sys.exit(-N) for a child killed by N, truncated to a byte. Only the signals a
    # process is killed by (KILL, TERM, ABRT, SEGV, BUS, INT): other codes near 256 are programs' own.
    if 192 <= code <= 255 and 256 - code in _KILLING:
        return Exit(code, 256 - code)
    return Exit(code, None)


# Not SIGHUP: 255 (256 - 1) is far more often a program's exit(-1) or ssh's own failure.
_KILLING = {signals.SIGKILL, signals.SIGTERM, signals.SIGABRT, signals.SIGSEGV, signals.SIGBUS, signals.SIGINT}


def signal_name(signum: int) -> str:
    try:
        return signals.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True)
class Report:
    """One fact a launcher, scheduler or the kernel logged about how a process ended."""

    # "child" (a launcher's report of its child), "received" (a signal the launcher itself was sent), "oom",
    # "time_limit", "preempted", "cancelled", "evicted"
    kind: str
    line: str  # the log line that says it, as logged
    exit: Exit | None = None  # a child's decoded exit, for "child"
    disk: bool = False  # an eviction for want of disk (ephemeral storage), not of memory
    root: bool = False  # the launcher names this child's failure the first one (torch elastic's "Root Cause")


# A launcher's report of one child's end: the number is the child's exit code in Python's convention.
_CHILD_CODE = [
    re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: \d+"),  # torch elastic's agent
    re.compile(r"^\s*exitcode\s*: (?P<code>-?\d+) \(pid: \d+\)"),  # its ChildFailedError summary
    re.compile(r"exits with return code = (?P<code>-?\d+)"),  # DeepSpeed's launcher
    re.compile(r"returned non-zero exit status (?P<code>-?\d+)"),  # subprocess.CalledProcessError (accelerate)
    re.compile(r"Process \S+ exited with (?:code|status) (?P<code>-?\d+)"),
    # Any other parent's words for a child's status, when negative: only a parent that outlived its child reports a
    # death by signal as -N (Python's subprocess `returncode=-9`, a pipeline's `OS return value: -9`).
    re.compile(r"\b(?:return|exit) ?(?:value|code|status)\s*[:=]?\s*(?P<code>-\d{1,2})\b", re.IGNORECASE),
    re.compile(r"\breturncode=(?P<code>-\d{1,2})\b"),
]
_CHILD_SIGNAL = [
    re.compile(r"died with <Signals\.SIG\w+: (?P<signal>\d+)>"),  # subprocess.CalledProcessError
    re.compile(r"Signal (?P<signal>\d+) \(SIG\w+\) received by PID \d+"),  # elastic's summary
    re.compile(r"is killed by signal: (?P<name>\w+)"),  # a DataLoader worker
    # A shell's word for its child's death: `bash: line 1:  27 Killed  python train.py` (or `./run.sh: line 28: ...`),
    # and macOS's bash with the signal's number after it (`Killed: 9`, `Terminated: 15`, `Abort trap: 6`), spaced as
    # pasted (`line 155 : 1126 Killed :9 python ...`).
    re.compile(
        r"^\S+: (?:line \d+ ?: )?\s*\d+ (?P<name>Killed|Terminated|Aborted|Abort trap|Segmentation fault|Hangup)"
        r"(?: ?: ?\d+)?(?:\s|$)"
    ),
    # zsh's: `zsh: killed     python train.py`, or `[1]    26478 killed     python train.py` for a job.
    re.compile(r"^(?:zsh: |\[\d+\]\s+(?:[+-]\s+)?\d+ )(?P<name>killed|terminated|abort|segmentation fault|hangup)\s"),
    re.compile(r"^srun: error: \S+: tasks? [\d,-]+: (?P<name>Killed|Terminated|Aborted|Segmentation fault)"),
    # An interactive shell's line for its foreground job killed by SIGKILL, alone on its line (as pasted, maybe in
    # bold; macOS's with the signal's number, `Killed: 9`), in the locales people paste most: English, Chinese, German,
    # French, Russian, Japanese.
    re.compile(r"^\W*(?P<name>Killed|已杀死|Getötet|Processus arrêté|Убито|強制終了)(?: ?: ?9)?\W*$"),
    # Its line for a foreground job that crashed: `Segmentation fault (core dumped)` (a bare `Aborted!` is click's
    # word for a Ctrl-C, so Aborted counts only with its core dump).
    re.compile(r"^\W*(?P<name>Segmentation fault|Bus error|Aborted(?= \(core))(?: \(core dumped\))?\W*$"),
]
_ROOT_CAUSE = re.compile(r"^\s*Root Cause \(first observed failure\)")
_KILLED_WORDS = ("已杀死", "Getötet", "Processus arrêté", "Убито", "強制終了")
_SHELL_WORDS = {
    **dict.fromkeys(_KILLED_WORDS, 9),
    **{"Killed": 9, "Terminated": 15, "Aborted": 6, "Abort": 6, "Abort trap": 6, "Segmentation fault": 11},
    **{"Bus error": 7, "Hangup": 1},
}
# A progress bar (tqdm's `n/total [elapsed<left, rate]`) ends without a newline, so the shell's report of the process
# killed while it was drawn lands on the bar's line, as pasted: `... 3/8 [00:02<00:03,  1.28it/s]Killed`.
_BAR = re.compile(r"[\d.]+[kMGTP]?i?B?/[\d.]+[kMGTP]?i?B? \[[^\]]*\]")
# The launcher itself was sent a signal (torch elastic's agent: it then stops its workers with the same signal).
_RECEIVED = re.compile(
    r"SignalException: Process \d+ got signal: (?P<signal>\d+)"
    r"|Received (?:(?P<received>\d+)|Signals\.(?P<name>SIG[A-Z]+)) death signal, shutting down"
)
# Someone pressed Ctrl-C: the terminal's echo of it (`^C` where the next output begins), or a launcher's or server's
# words for the SIGINT it got. A traceback pasted after it is often cut before its `KeyboardInterrupt`.
_INTERRUPTED = re.compile(
    r"^\^C"
    r"|(?i:\b(?:received|got|caught) (?:a )?SIGINT\b|\bSIGINT received\b"
    r"|\bKeyboard ?interrupt(?:ion)? (?:received|detected)|\bDetected KeyboardInterrupt\b"
    r"|\binterrupted by (?:the )?user\b)"
)
# The kernel, a cgroup, SLURM or Kubernetes taking memory back.
_OOM = re.compile(
    r"Out of memory: Kill(?:ed)? process"
    r"|Memory cgroup out of memory"
    r"|oom[-_]kill(?:er)?\b"
    r"|\bOOMKilled\b"
    r"|OUT_OF_MEMORY"
    r"|task \d+: Out Of Memory"
    r"|The node was low on resource: memory"
    r"|Exceeded job memory limit"
    r"|Your session crashed after using all available RAM"  # Colab (or Kaggle) restarting the notebook's runtime
    r"|Your notebook tried to allocate more memory than is available"  # Kaggle's
    # A memory monitor killing workers to save the node (Ray's raylet, Kubernetes, a phone's low-memory killer); not
    # Ray's summary that killed none (`0 Workers (tasks / actors) killed due to memory pressure (OOM), 2 Workers
    # crashed due to other reasons`).
    r"|(?<!\b0 Workers \(tasks / actors\) )killed due to (?:memory pressure|the node running low on memory)"
    r"|running beyond (?:physical|virtual) memory limits"  # YARN
    r"|\bexceed(?:ed|s|ing) (?:its |the |their )?(?:container |pod |job |step )?memory limit",
    re.IGNORECASE,
)
# slurmstepd's banner (`*** JOB 1 ON node CANCELLED AT <time> DUE TO TIME LIMIT ***`; some releases put the node
# last, `... DUE TO TIME LIMIT on node ***`), and sacct's State column for a job someone cancelled (`CANCELLED by
# <uid>`, the uid of whoever ran scancel). Without a reason the banner says only that the step got SIGTERM or SIGKILL
# from the scheduler: scancel, and also a preemption with a grace time (slurmctld first sends a plain SIGTERM, and a
# step prints its banner once), so it does not say who.
_SLURM_CANCELLED = re.compile(
    r"\*\*\* (?:JOB|STEP) [\d.]+ (?:ON \S+ )?CANCELLED AT \S+(?: DUE TO (?P<why>[A-Z ]+?))?(?: on \S+)?(?: \*\*\*|$)"
    r"|(?:^|[|\s])CANCELLED by \d+\b"
)
_K8S_EVICTED = re.compile(r"The node was low on resource: (?P<what>[\w-]+)|\bEvicted\b")
_PREEMPTED = re.compile(
    r"DUE TO (?:PREEMPTION|NODE FAIL|JOB REQUEUE)"  # a requeue: SLURM gives the node to another job, this one resumes
    r"|\bSpot (?:instance )?(?:interruption|termination)"
    r"|instance (?:was )?preempted"
    r"|\bpreempted by the (?:scheduler|platform|provider)"
    r"|(?-i:\|PREEMPTED\||\sPREEMPTED\s+\d+:\d+\b)"  # sacct's State column (then its ExitCode), -P or aligned
    r"|\bPreempted by (?:pod \S+|\S+/\S+) on node"  # Kubernetes' scheduler making room for a pod of higher priority
    # Clouds reclaiming spot/preemptible machines: GCP's metadata notice (and its audit log's event), Azure's scheduled
    # event, a spot VM stopped by the provider, a TPU preempted. TensorFlow's TPU ShutdownHook names the workers that
    # vanished with it "lame".
    r"|termination is imminent|compute\.instances\.preempted|\bEventType\W+Preempt\b"
    r"|(?:spot|preemptible) (?:VM |instance |node )?(?:was|has been) (?:stopped|terminated|reclaimed)"
    # A job or cluster manager telling of the machines it lost: submitit's handler of SLURM's preemption signal (`this
    # job is preempted`: it requeues the job), SkyPilot's controller (`The cluster is preempted.`), Ray's node death
    # (`failed due to node preemption`, `Terminated due to preemption`, AUTOSCALER_DRAIN_PREEMPTED), a spot or
    # low-priority VM evicted or reclaimed (Azure, GKE, EKS), a node's state `Preempted` (Azure Batch), AWS's node
    # termination handler (`Spot ITN`).
    r"|\b(?:cluster|node|instance|VM|virtual machine|machine|host|worker|pod|job|TPU|slice|allocation)s?\b"
    r"(?:\s+\S+){0,2}?\s+(?:is|are|was|were|has been|have been|got|being)\s+preempted\b"
    # Not a hedge (TensorFlow's `This may be due to a preemption ... or a gRPC failure` before any session error).
    r"|(?<!may be )(?<!might be )(?<!could be )\bdue to (?:a |the )?(?:node |spot |instance |VM )?preemption\b"
    r"|\bAUTOSCALER_DRAIN_PREEMPTED\b"
    r"|\b(?:spot|low[- ]priority|preemptible) (?:VM|node|instance|virtual machine)s?\b(?:\s+\S+){0,2}?\s+"
    r"(?:is|was|were|has been|have been|got|being)\s+(?:evicted|preempted|reclaimed)\b"
    r"|\b(?:in )?state:? Preempted\b|\bSpot[ _]ITN\b"
    # A cluster manager announcing machines it is about to lose, with a reason that is the platform's, not its own
    # scaling down (idle, too many nodes): Ray's and Anyscale's autoscaler (`Instance k-1 (node IP: ...) will be
    # terminated soon (reason: kubernetes-pod-termination)`), a spot interruption, an eviction, maintenance.
    r"|\b(?:instance|node|pod|VM|machine|worker|host)s?\b[^\n]{0,80}?\b(?:will be|is being|are being|was|were|has been"
    r"|have been) (?:terminated|stopped|deleted|shut ?down|drained)\b(?: soon)?[^\n]{0,20}?\(?reason:? ?[\w-]*"
    r"(?:preempt|spot|interrupt|evict|pod[ _-]?(?:termination|deletion)|maintenance|reclaim|node[ _-]?shutdown)"
    r"|\bTPU\b[^.]{0,80}\b(?:was|is|has been|got) preempted|\blame workers found"
    r"|\bspot/instance-action\b"  # AWS: the metadata path a spot instance polls for its interruption notice
    # The machine shutting down under the job: the ACPI power button a cloud presses to stop a VM (systemd-logind's
    # words), the shutdown that follows, a Kubernetes node's graceful shutdown.
    r"|\bPower key pressed\b|\bSystem is (?:powering down|going down|rebooting)\b|\bPowering off\.\.\."
    r"|\bThe system (?:is going down|will (?:power ?off|halt|reboot)) (?:for \w+ )?now\b"
    r"|in response to imminent node shutdown|\bnode is shutting down\b"
    # A notebook platform dropping the runtime the job ran in (Colab, and its words as other hosted notebooks echo).
    r"|\bruntime (?:has been |was |got )?disconnected\b|\bNot connected to a runtime\b",
    re.IGNORECASE,
)


# Other schedulers' and platforms' words for a job stopped at its wall-clock limit: sacct's State column, PBS/Torque,
# LSF, SGE, Kubernetes' activeDeadlineSeconds (a Job's, a RayJob's), serverless functions (Modal), SageMaker's
# MaxRuntimeInSeconds, CI runners (GitHub Actions, GitLab), a parent process's own limit on its child (subprocess).
_TIME_LIMIT = re.compile(
    r"(?-i:\|TIMEOUT\||\sTIMEOUT\s+\d+:\d+\b)"
    r"|PBS: job killed: walltime \d+ exceeded limit"
    r"|\bTERM_RUNLIMIT\b|job killed after reaching LSF run time limit"
    r"|exceeded hard wallclock time"
    r"|Job was active longer than specified deadline|\bDeadlineExceeded\b"
    r"|\bactiveDeadlineSeconds\b.{0,60}\b(?:exceeded|passed|reached)\b"
    r"|\b(?:exceeded|passed|reached) (?:its |the )?activeDeadlineSeconds\b"
    r"|this job is timed-out"  # submitit's handler of SLURM's signal before the time limit
    r"|^timeout: sending signal \w+ to command"  # coreutils' timeout --verbose, at the limit it was given
    r"|\bFunctionTimeoutError\b|\bhit its timeout of \d+"  # Modal
    r"|\bMax(?:Runtime|WaitTime)Exceeded\b"  # SageMaker's stopping condition (a spot job's wait included)
    r"|execution took longer than \S+ seconds"  # GitLab's runner (GitHub's says it in the words of the next line)
    r"|\bexceeded (?:the |its )?(?:maximum|max) (?:allowed )?(?:execution|run(?:ning)?|wall[- ]?clock) ?"
    r"(?:time|duration)\b"
    r"|\bTimeoutExpired: Command .+ timed out after [\d.]+ seconds",
    re.IGNORECASE,
)


def read(lines: list[str]) -> list[Report]:
    """Every launcher, scheduler and kernel report in the lines, oldest first."""
    found: list[Report] = []
    after_root = False
    for raw in lines:
        line = clean(raw)
        if _ROOT_CAUSE.search(line):
            after_root = True
        elif report := _report(line, raw.strip()):
            if after_root and report.kind == "child":
                report, after_root = replace(report, root=True), False
            found.append(report)
    return found


def _report(line: str, raw: str) -> Report | None:
    if (slurm := _SLURM_CANCELLED.search(line)) and not _PREEMPTED.search(line):
        why = (slurm["why"] or "").strip()
        kind = "time_limit" if why == "TIME LIMIT" else "cancelled" if not why else "oom" if "MEMORY" in why else ""
        return Report(kind, raw) if kind else None
    if _PREEMPTED.search(line):
        return Report("preempted", raw)
    if _TIME_LIMIT.search(line):
        return Report("time_limit", raw)
    if _OOM.search(line):
        return Report("oom", raw)
    if (evicted := _K8S_EVICTED.search(line)) and evicted["what"] != "memory":
        return Report("evicted", raw, disk=evicted["what"] == "ephemeral-storage")
    for pattern in _CHILD_CODE:
        if match := pattern.search(line):
            return Report("child", raw, decode(int(match["code"])))
    if received := _RECEIVED.search(line):
        number = int(received["signal"] or received["received"] or 0) or _signal_number(received["name"])
        return Report("received", raw, Exit(None, number))
    if _INTERRUPTED.search(line):
        return Report("received", raw, Exit(None, int(signals.SIGINT)))
    after_bar = _BAR.split(line.split("\r")[-1])[-1]
    for pattern in _CHILD_SIGNAL:
        if match := pattern.search(line) or pattern.search(after_bar):
            if match.groupdict().get("signal"):
                return Report("child", raw, Exit(None, int(match["signal"])))
            name = match["name"]
            number = _SHELL_WORDS.get(name.capitalize()) or _signal_number(name)
            return Report("child", raw, Exit(None, number)) if number else None
    return None


def _signal_number(name: str) -> int | None:
    try:
        return int(signals.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        return None


def child_exit(reports: list[Report]) -> Report | None:
    """The child whose end the launcher names first: its "Root Cause", else the first killed by a signal, else the
    first that failed (the ranks that died after it were sent SIGTERM by the launcher: its cleanup, not the
    cause)."""
    children = [r for r in reports if r.kind == "child" and r.exit and (r.exit.signal or r.exit.code)]
    if root := next((r for r in children if r.root), None):
        return root
    killed = [r for r in children if r.exit and r.exit.signal in (signals.SIGKILL, signals.SIGSEGV, signals.SIGBUS)]
    failed = [r for r in children if r.exit and r.exit.signal is None]
    ranked = killed or failed or children
    return ranked[0] if ranked else None
