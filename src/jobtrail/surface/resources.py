"""Job resources: a job's receipt and its metric series as JSON, for clients that read resources.

They hold what the inspect and metrics tools return as structured content (the same models), so a
resource and a tool call never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from pydantic import BaseModel

from jobtrail.errors import JobtrailError
from jobtrail.surface.toolspec import service_of

if TYPE_CHECKING:
    from jobtrail.surface.toolspec import ServiceSource

RECEIPT_URI = "jobtrail://jobs/{job_id}"
METRICS_URI = "jobtrail://jobs/{job_id}/metrics"


def add_job_resources(server: MCPServer, service: ServiceSource) -> None:
    for uri, name, title, description, read in (
        (
            RECEIPT_URI,
            "job_receipt",
            "A job's receipt",
            "The job's status, termination_reason, progress and every attempt's receipt (placement, config and "
            "script sha256, data manifest, environment, checkpoints, metrics): inspect(job_id)'s structured content.",
            lambda job_id: service_of(service).inspect(job_id),
        ),
        (
            METRICS_URI,
            "job_metrics",
            "A job's metric series",
            "Every metric the job's steps logged as {name: [[step, value], ...]}, attempts joined, with last values "
            "and trends: metrics(job_id)'s structured content.",
            lambda job_id: service_of(service).metrics(job_id),
        ),
    ):
        server.resource(uri, name=name, title=title, description=description, mime_type="application/json")(
            _as_json(read)
        )


def _as_json(read: Callable[[str], BaseModel]) -> Callable[[str], str]:
    """The resource function for a job id: what `read` returns for it, as JSON."""

    def job_resource(job_id: str) -> str:
        try:
            return read(job_id).model_dump_json(indent=2)
        except JobtrailError as exc:  # an unknown job id: the message says what to do
            raise ResourceError(str(exc)) from exc

    return job_resource
