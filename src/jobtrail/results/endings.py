"""How a job's ending reads in the tools' results: what its alerts mean for its verdict, the fix for an ending that
no retry mends, and the shape of a next step. Pure.

A job's own watch (scripts/_watch.py) prints `alert` events while it trains. Most are advice (a spike that
may settle, a stall); a few say the run's result cannot be used as it is: its weights are gone (the run
stopped itself and ended `diverged`), or it learned nothing though it ended `succeeded` (GRPO rewards that
never told completions apart; `nothing_learned`: a learning rate of 0, or weights that no logged step moved).
Those are blocking: the verdict reads "succeeded, but ...", and a job chained
after it with `after=` is held instead of training on it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from jobtrail.models import TerminationReason as R

# The job-side codes (scripts/_watch.py STOPPING, and the methods' check_steps) whose run is not usable as is.
BLOCKING = ("nan_loss", "nan_weights", "loss_diverged", "collapsed", "grpo_reward_std_zero", "nothing_learned")


def blocking(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in alerts if a.get("code") in BLOCKING]


def verdict(status: str, reason: str | None, alerts: list[dict[str, Any]]) -> str:
    """The state as an agent should repeat it: "succeeded, but grpo_reward_std_zero at step 4: ..."."""
    said = status + (f" ({reason})" if reason and reason != status else "")
    stops = blocking(alerts)
    if status != "succeeded" or not stops:
        return said
    first = stops[0]
    return f"{said}, but {first['code']} at step {first.get('step')}: {first.get('message')}"


# The endings no retry mends, with the fix each calls for: the retry policy refuses to retry them (outcomes/retry.py)
# and a failed job's result names the fix.
NEVER = {
    R.BAD_INPUT: "Fix the data (validate_dataset shows what is wrong), then submit a new job.",
    R.CONFIG_ERROR: "Fix the argument named in the message, then submit a new job.",
    R.DEPENDENCY_ERROR: (
        "Install the missing package in the job's environment (pip install 'jobtrail[train]'), then submit again."
    ),
    R.AUTH_ERROR: "Set HF_TOKEN to a token with access (accept gated models' terms first), then submit again.",
}


# What a next step does: a tool it calls, or one of these (load the model in Python, train it further as a new job,
# open its trackio run, make a change the agent decides).
StepAction = Literal[
    "submit",
    "wait",
    "inspect",
    "logs",
    "cancel",
    "release",
    "retry",
    "evaluate",
    "convert_gguf",
    "metrics",
    "plot",
    "ps",
    "report",
    "validate_dataset",
    "estimate_cost",
    "load",
    "continue_training",
    "watch",
    "fix",
]


class NextStep(BaseModel):
    action: StepAction
    kind: Literal["tool", "python", "shell", "url"] = Field(
        description="What `call` is: a jobtrail tool call, Python code, a shell command, or a page to open."
    )
    call: str | None = Field(
        description="The exact call (or code) to run, every argument written out (`...`: a value only you know, such "
        "as held-out data); None when the step is a change to make."
    )
    why: str

    def as_line(self) -> str:
        """The step in a summary line (code stays in the structured field: it is several lines)."""
        if self.kind == "python":
            return f"load it in Python (next_steps has the code): {self.why}"
        if self.call is None:
            return self.why
        return f"`{self.call}` {self.why}" if self.kind == "shell" else f"{self.call}: {self.why}"


NextSteps = Annotated[
    list[NextStep],
    Field(
        description="What to do next, decided from what just happened: each an exact call (kind tool: a jobtrail "
        "call to send as written; python, shell or url) and why, or (call None) a change to make. A tool call here "
        "is one the tool accepts: force, retry, metrics or plot appear only where they would be."
    ),
]


def step_lines(steps: list[NextStep]) -> list[str]:
    """The steps as a summary's Next lines."""
    return [step.as_line() for step in steps]
