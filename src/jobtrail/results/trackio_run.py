"""Where an attempt's trackio run is, for its receipt: read from the job's own `trackio` event.

The job announces the run once trackio logs it (scripts/_tracking.py): project, run name, group (the
job id), and either the local folder (TRACKIO_DIR) or the Space. A trackio that failed says so in an
`alert` event with code "trackio.failed"; training went on, and the step events keep every metric.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

TRACKIO_FAILED = "trackio.failed"


class TrackioRun(BaseModel):
    """An attempt's trackio run: where its metrics went and how to see them."""

    project: str
    run: str = Field(description="The run's name in trackio: <job_id>-attempt-<n>.")
    group: str | None = Field(None, description="trackio's group of the run: the job id.")
    local_dir: str | None = Field(None, description="The trackio folder a local job wrote to (TRACKIO_DIR).")
    space_id: str | None = Field(None, description="The private Hugging Face Space a remote job reported to.")
    url: str | None = Field(None, description="The Space's page, for a remote job.")
    open: str = Field(description="How to see it: the dashboard command (local) or the Space's URL (remote).")
    failed: str | None = Field(
        None, description="What went wrong with trackio (an alert): training was not affected; metrics() has it all."
    )
    version: str | None = Field(None, description="The job's trackio version (None: it could not be imported).")


def trackio_run(events: list[dict[str, Any]]) -> TrackioRun | None:
    """The attempt's trackio run from its events (the last `trackio` event), with its first failure."""
    announced = [e for e in events if e.get("event") == "trackio" and e.get("project") and e.get("run")]
    if not announced:
        return None
    event = announced[-1]
    failures = [e for e in events if e.get("event") == "alert" and e.get("code") == TRACKIO_FAILED]
    space_id = event.get("space_id")
    project = str(event["project"])
    return TrackioRun(
        project=project,
        run=str(event["run"]),
        group=event.get("group"),
        local_dir=None if space_id else event.get("dir"),
        space_id=space_id,
        url=event.get("url"),
        open=event.get("url") or dashboard_command(project),
        failed=failures[0].get("message") if failures else None,
        version=event.get("version"),
    )


def dashboard_command(project: str | None = None) -> str:
    """The shell command that opens trackio's dashboard on the local runs (of one project)."""
    return "jobtrail dashboard" + (f" --project {_shell_word(project)}" if project else "")


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(text)
