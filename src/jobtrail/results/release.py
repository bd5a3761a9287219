"""release's result: a held follower started on its parent's result, or why it was not."""

from __future__ import annotations

from pydantic import Field

from jobtrail.models import ToolResult


class ReleaseResult(ToolResult):
    job_id: str
    released: bool = Field(description="True: it starts on its parent's result at the next dispatch.")
    status: str = Field(description="The job's status after the call.")
    message: str
    fix: str | None = Field(None, description="A refusal's fix: the call that makes a release possible, or moot.")

    def headline(self) -> str:
        if self.released:
            return f"**{self.job_id}** released ({self.status}): {self.message}"
        return f"Not released: {self.message}" + (f" Fix: {self.fix}" if self.fix else "")

    def next_calls(self) -> list[str]:
        job = f'job_id="{self.job_id}"'
        if self.released:
            return [f"wait({job}) until it ends", f"inspect({job}) for its receipt"]
        return [f"inspect({job}) for what it waits for"]
