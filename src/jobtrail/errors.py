"""The exception tree. Every error carries a message written for an agent and the fix.

    JobtrailError             anything jobtrail refuses or cannot do; has .fix
    ├── NotFoundError         an unknown job id, file or resource
    ├── InvalidRequestError   arguments that cannot be turned into a job
    └── BackendError          a backend could not launch, read or stop an attempt

The MCP surface turns each into a ToolError (message + fix); the CLI prints it and exits 2.
"""

from __future__ import annotations


class JobtrailError(Exception):
    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}\nFix: {self.fix}" if self.fix else self.message


class NotFoundError(JobtrailError):
    pass


class InvalidRequestError(JobtrailError):
    pass


class BackendError(JobtrailError):
    """`reason` is the termination reason an attempt gets when this stops its launch."""

    def __init__(self, message: str, fix: str | None = None, reason: str = "config_error") -> None:
        super().__init__(message, fix)
        self.reason = reason
