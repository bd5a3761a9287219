"""The small interface every job backend implements (local runner, HF Jobs).

Backends know nothing about the ledger or the server: they start a script, say whether it is
still running, hand back log bytes, and stop it. The service owns everything else.
"""

from __future__ import annotations

from typing import Protocol

from jobtrail.models import LaunchRequest, LogChunk, Placement, Probe


class Backend(Protocol):
    name: str
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
