"""The small interface every job backend implements (local runner, HF Jobs).

Backends know nothing about the ledger or the server: they start a script, say whether it is
still running, hand back log bytes, and stop it. The service owns everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from jobtrail.models import LaunchRequest, LogChunk, Placement, Probe

# Where a job's results go: a folder on the machine it ran on, or pushed to a Hub repo (its disk is gone when it ends).
Output = Literal["directory", "hub_repo"]
# Where a job's trackio run is stored: one folder on the server's machine that every such job shares (TRACKIO_DIR),
# or a Space in the job's namespace that trackio makes from inside the job.
TrackioStore = Literal["folder", "space"]


@dataclass(frozen=True)
class BackendTraits:
    """What a backend is, declared once (the way SkyPilot's clouds declare their features), so that code outside
    backends/ asks what it needs to know instead of comparing the backend's name: a new backend declares these and
    every caller behaves accordingly. registry.py holds each backend's; a job's row names its backend, so callers
    look them up by that name (registry.traits_of) without a live backend object."""

    name: str  # the backend's name: in tool arguments (submit's backend=) and on every job's row
    place: str  # where its jobs run, in prose: "this machine", "HF Jobs"
    # Its jobs run on the machine of the server that launches them: they read that machine's files, Python, devices
    # and Hub cache, their log is a file there, and their host (AttemptRecord.host) is that machine, whose one
    # server reaches them. Otherwise they run elsewhere and see none of it.
    runs_here: bool
    output: Output
    # A job names the hardware it runs on by flavor (estimate/hardware.py's catalog, with each flavor's GPUs and
    # price_per_hour); without flavors it runs on the backend's own machine, whatever flavor it names.
    flavors: bool
    # Its runs cost money: by the minute at their flavor's price_per_hour (the flavor catalog is the price table),
    # so spending caps (max_cost_usd, the daily budget) hold them; an unbilled run costs nothing.
    billed: bool
    host_noun: str  # what its host is, in prose: "host" (a machine), "namespace" (the account jobs run and bill in)
    host_in: str  # a job's place at its host, in prose: "on host", "in namespace"
    host_title: str  # whose a job is, at the head of a sentence: "Host", "HF namespace"
    host_set_by: str  # how a server's host is chosen, in prose (the setting, then its fallback)
    cancel: str  # how a cancel stops a running job, in prose
    # The PEP 723 [tool] table a job's script header carries to say how this backend runs it (flavor, timeout,
    # secrets); None: the header needs none.
    script_table: str | None
    trackio: TrackioStore


class Backend(Protocol):
    name: str
    traits: BackendTraits
    # How many attempts may run at once; None means the backend queues for itself.
    max_concurrent: int | None

    @property
    def host(self) -> str | None:
        """Whose the jobs this backend launches are, as the ledger names it (AttemptRecord.host): a local
        backend's machine (JOBTRAIL_HOST_ID), a remote one's account (HF Jobs: the namespace it launches in,
        where the jobs run and are billed). Only a server whose backend has the same host reaches them, and
        slots are counted per host. Raises BackendError when it cannot be learned now (a remote account is
        asked over the network)."""
        ...

    def launch(self, request: LaunchRequest) -> Placement:
        """Start the attempt now and return where it runs. Raises BackendError."""
        ...

    def probe(self, placement: Placement) -> Probe:
        """Running, exited (with its exit record) or lost (the backend no longer knows it)."""
        ...

    def read_log(self, placement: Placement, offset: int = 0, max_lines: int | None = None) -> LogChunk:
        """Complete log lines from byte `offset` on (at most `max_lines`); never blocks.

        The returned offset points just past the last returned line. A log may be capped (its middle dropped
        and marked); a cursor into the dropped part reads the marker line and goes on after it.
        """
        ...

    def read_events(self, placement: Placement, offset: int = 0) -> LogChunk:
        """Lines carrying the job's events, from `offset` (the ledger's log_offset) on; never capped, so the
        receipt has every event however much else the job printed. Lines without an event may come too."""
        ...

    def read_tail(self, placement: Placement, count: int) -> LogChunk:
        """The log's last `count` lines (or fewer), read from its end without reading the rest; the offset is
        the cursor of the line that follows them."""
        ...

    def cancel(self, placement: Placement) -> None:
        """Ask the attempt to stop (SIGTERM, then SIGKILL after a grace period)."""
        ...

    def find(self, labels: dict[str, str], workdir: str, secret_sources: list[str]) -> Placement | None:
        """The attempt launched with these labels (a remote backend) or into this workdir (the local one), when
        the process that launched it died before recording where it runs; None when the backend knows no such
        attempt. Raises BackendError when the backend cannot be asked."""
        ...
