"""What every use case (runs, tasks, queries, watch) is built on: the ServiceContext they all share,
its ledger, and the one Tracker each refreshes before it reads or changes a job."""

from __future__ import annotations

from jobtrail.service.context import ServiceContext
from jobtrail.service.tracker import Tracker


class UseCase:
    def __init__(self, context: ServiceContext, tracker: Tracker) -> None:
        self.context = context
        self.ledger = context.ledger
        self.tracker = tracker
