"""Where a job's trackio run goes, as the server decides it. Pure.

Every training job reports to trackio unless its `report_to` hyperparameter (TRL's name; jobtrail's
default "trackio") leaves it out. A local job writes into the server's trackio folder (TRACKIO_DIR,
set in the job's environment); a remote job's disk is gone when it ends, so its run goes to a
private Space: the caller's `trackio_space_id`, else jobtrail-trackio in the namespace of the job's
output repo. trackio creates that Space from inside the job: jobtrail never creates it (a Space made
any other way has no trackio app, and its dashboard stays empty).

    reports_to_trackio(training_args) -> bool
    trackio_space(training_args, namespace) -> "<namespace>/jobtrail-trackio" | the caller's | None
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRACKIO = "trackio"
TRACKIO_SPACE_NAME = "jobtrail-trackio"


def reports_to_trackio(training_args: Mapping[str, Any]) -> bool:
    """Whether the job reports to trackio: `report_to` names it (a config without one does)."""
    report_to = training_args.get("report_to")
    if report_to is None:
        return True
    return TRACKIO in ([report_to] if isinstance(report_to, str) else list(report_to))


def trackio_space(training_args: Mapping[str, Any], namespace: str | None) -> str | None:
    """The Space a remote job's trackio run goes to, as "<namespace>/<name>"; None when the job does not
    report to trackio or no namespace is known. A caller's `trackio_space_id` without a namespace is
    in `namespace` (trackio puts it in the token's)."""
    if not reports_to_trackio(training_args):
        return None
    space = str(training_args.get("trackio_space_id") or TRACKIO_SPACE_NAME)
    if "/" in space:
        return space
    return f"{namespace}/{space}" if namespace else None
