"""Where a long tool call reports its progress while it runs.

The MCP server points it at the client's progress notifications for each call, the CLI at stderr; a
tool (wait) reads it here and hands it to the service as a plain callback. A context variable, not an
argument: the tool's parameters are its published arguments, and a progress sink is not one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from jobtrail.results.watch import ProgressSink

_sink: ContextVar[ProgressSink | None] = ContextVar("jobtrail_progress_sink", default=None)


def progress_sink() -> ProgressSink | None:
    """The current call's progress sink, or None where nobody listens."""
    return _sink.get()


@contextmanager
def reporting_to(sink: ProgressSink | None) -> Iterator[None]:
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)
