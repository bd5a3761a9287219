"""Job resources: a job's receipt and its metric series as JSON, for clients that read resources.

They hold what the inspect and metrics tools return as structured content (the same models), so a
resource and a tool call never disagree.
"""

from __future__ import annotations

from collections.abc import Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from pydantic import BaseModel

from jobtrail.errors import JobtrailError
from jobtrail.service.facade import JobService

RECEIPT_URI = "jobtrail://jobs/{job_id}"
METRICS_URI = "jobtrail://jobs/{job_id}/metrics"


def add_job_resources(server: MCPServer, service: JobService) -> None:
    @server.resource(
        RECEIPT_URI,
        name="job_receipt",
        title="A job's receipt",
        description="The job's status, termination_reason, progress and every attempt's receipt (placement, config "
        "and script sha256, data manifest, environment, checkpoints, metrics): inspect(job_id)'s structured content.",
        mime_type="application/json",
    )
    def receipt(job_id: str) -> str:
        return _json(lambda: service.inspect(job_id))

    @server.resource(
        METRICS_URI,
        name="job_metrics",
        title="A job's metric series",
        description="Every metric the job's steps logged as {name: [[step, value], ...]}, attempts joined, with "
        "last values and trends: metrics(job_id)'s structured content.",
        mime_type="application/json",
    )
    def metrics(job_id: str) -> str:
        return _json(lambda: service.metrics(job_id))


def _json(read: Callable[[], BaseModel]) -> str:
    try:
        return read().model_dump_json(indent=2)
    except JobtrailError as exc:  # an unknown job id: the message says what to do
        raise ResourceError(str(exc)) from exc
