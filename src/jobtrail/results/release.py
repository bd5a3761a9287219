"""release's result: a held follower started on its parent's result, or why it was not."""

from __future__ import annotations

from pydantic import Field

from jobtrail.models import ToolResult
from jobtrail.results.endings import NextSteps, step_lines


class ReleaseResult(ToolResult):
    job_id: str
    released: bool = Field(description="True: it starts on its parent's result at the next dispatch.")
    status: str = Field(description="The job's status after the call.")
    message: str
    fix: str | None = Field(None, description="A refusal's fix: the call that makes a release possible, or moot.")
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        if self.released:
            return f"**{self.job_id}** released ({self.status}): {self.message}"
        return f"Not released: {self.message}" + (f" Fix: {self.fix}" if self.fix else "")

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)
