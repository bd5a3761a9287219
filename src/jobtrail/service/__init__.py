"""Use cases behind every tool, reached through the JobService facade."""

from jobtrail.service.facade import JobService

__all__ = ["JobService"]
