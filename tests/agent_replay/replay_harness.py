"""A careless agent over a real MCP client session, and the replay of every call jobtrail proposed to it.

An agent sends what a result proposes as written: the calls in `next_steps[].call` (kind tool) and the calls in
any other text of the structured content (a Fix, a refusal's message, the summary's Next lines); on an error
result, the calls its text names (clients pass an error's text alone). `Agent.replay_proposals()` sends each such
call once and reports every one that came back as a tool error (an unknown argument, a schema error, a refusal
raised as an error) or as a refusal in the structured content (a rejected submit, a retry not retried, a release
not released, an evaluation or conversion not started): a proposal must be a call that is accepted.

Replays change nothing the scenario sees. Read-only tools run on the agent's own service; `submit` is replayed
with dry_run=true, `wait` with timeout_s=0 unless the call gives one. Every other call (retry, evaluate,
convert_gguf, cancel, release) runs on a sandbox: a copy of the ledger served by another host's jobtrail, whose
local backend has no slot, so it queues what a call starts and never launches, probes or signals a process (the
world's attempts belong to the world's host). Acceptance is decided before any launch: the sandbox answers as
the world would.

A value the proposing text leaves blank (`...`) is one only the agent knows (held-out data for evaluate, a model
for a submit planned from a dataset alone): `fill` gives the scenario's choice for such argument names; any other
blank, a positional `...` standing for arguments the agent already gave, or a positional value is a failure,
since jobtrail knows those values.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client

from jobtrail.backends.local import LocalBackend
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec, JobStatus, NewAttempt, RunRecord, TerminationReason
from jobtrail.preflight.plan import Conversion, plan
from jobtrail.service.context import new_run_id
from jobtrail.service.facade import JobService
from jobtrail.surface.cli_calls import Call, parse_call
from jobtrail.surface.server import build_server
from support.jobs import load_script_module
from support.records import new_attempt
from support.toolcalls import calls_in

# Tools an agent may call with no effect on the ledger (besides what a dry run writes for itself).
READ_ONLY = frozenset(
    {"ps", "inspect", "logs", "wait", "metrics", "plot", "report", "hardware", "estimate_cost", "validate_dataset"}
)
# Keys of structured content that hold a job's own output or data, not jobtrail's words: never proposals.
NOT_PROPOSALS = frozenset({"lines", "evidence", "script", "record", "samples", "environment", "config"})
SANDBOX_HOST = "agent-replay-sandbox"
WORLD_HOST = "agent-world"


@dataclass(frozen=True)
class Reply:
    tool: str
    arguments: dict[str, Any]
    is_error: bool
    text: str
    content: dict[str, Any] | None

    @property
    def summary(self) -> str:
        return str((self.content or {}).get("summary", self.text))

    def __getitem__(self, name: str) -> Any:
        assert self.content is not None, (self.tool, self.arguments, self.text)
        return self.content[name]


@dataclass(frozen=True)
class Failure:
    proposed_by: str  # the call whose result proposed it
    call: str
    why: str

    def __str__(self) -> str:
        return f"{self.call}\n    proposed by {self.proposed_by}\n    {self.why}"


def proposals(reply: Reply) -> list[str]:
    """Every tool call `reply` proposes, as written (in order, each once)."""
    texts = list(_texts(reply.content)) if reply.content is not None and not reply.is_error else [reply.text]
    found: dict[str, None] = {}
    for text in texts:
        for call in calls_in(text):
            if call.name in TOOLS:
                found.setdefault(call.text, None)
    return list(found)


def _texts(value: Any, key: str = "") -> Iterator[str]:
    if key in NOT_PROPOSALS:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item, key)
    elif isinstance(value, dict):
        if value.get("kind") in ("python", "shell", "url"):  # a next step that is code, a command or a page
            value = {k: v for k, v in value.items() if k != "call"}
        for name, item in value.items():
            yield from _texts(item, name)


def refusal(reply: Reply) -> str | None:
    """Why `reply` refused its call, or None when the call was accepted."""
    if reply.is_error:
        return f"tool error: {reply.text}"
    data = reply.content or {}
    if reply.tool == "submit":
        errors = [f for f in data.get("findings", []) if f["severity"] == "error"]
        if data["status"] == "rejected" or (data["status"] == "dry_run" and errors and not data.get("forced")):
            return f"refused: {data['summary']}"
    if reply.tool == "retry" and not data.get("retried"):
        return f"not retried: {data['summary']}"
    if reply.tool == "release" and not data.get("released"):
        return f"not released: {data['summary']}"
    if reply.tool in ("evaluate", "convert_gguf") and data.get("job_id") is None:
        return f"not started: {data['summary']}"
    return None


class Agent:
    """A client session with a server over `service`. Each reply is recorded, and the calls it proposes are sent at
    once, as an agent following them would, before the conversation goes on: `failures` holds the ones that did not
    work (each distinct call once)."""

    def __init__(self, service: JobService, portal: BlockingPortal, fill: dict[str, Any] | None = None) -> None:
        self.service = service
        self.portal = portal
        self.fill = fill or {}
        self.replies: list[Reply] = []
        self.failures: list[Failure] = []
        self.replayed = 0
        self._seen: set[str] = set()
        self._stack = ExitStack()
        server = build_server(service)
        self._client: Client = self._stack.enter_context(portal.wrap_async_context_manager(Client(server)))

    def close(self) -> None:
        self._stack.close()

    def call(self, tool: str, **arguments: Any) -> Reply:
        reply = self._send(tool, arguments)
        self.replies.append(reply)
        by = f"{tool}({json.dumps(arguments, default=str)})"
        for text in proposals(reply):
            if text not in self._seen:
                self._seen.add(text)
                self.replayed += 1
                why = self._replay(text)
                if why:
                    self.failures.append(Failure(by, text, why))
        return reply

    def _send(self, tool: str, arguments: dict[str, Any]) -> Reply:
        result = self.portal.call(self._client.call_tool, tool, arguments)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return Reply(tool, arguments, bool(result.is_error), text, result.structured_content)

    def sandbox(self) -> Agent:
        """An agent on a copy of this agent's ledger, served by another host with no room to launch (see above);
        closed with this one."""
        made = Agent(sandbox_service(self.service), self.portal, self.fill)
        self._stack.callback(made.close)
        return made

    def _replay(self, text: str) -> str | None:
        call = parse_call(text)
        if call is None:
            return "not a call an agent can send (it does not parse as one)"
        arguments, blank = self._arguments(call)
        if blank:
            return blank
        if call.tool == "submit":
            arguments.setdefault("dry_run", True)
        if call.tool == "wait":
            arguments.setdefault("timeout_s", 0)
        if call.tool in READ_ONLY or (call.tool == "submit" and arguments["dry_run"]):
            return refusal(self._send(call.tool, arguments))
        sandbox = Agent(sandbox_service(self.service), self.portal, self.fill)
        try:
            return refusal(sandbox._send(call.tool, arguments))
        finally:
            sandbox.close()

    def _arguments(self, call: Call) -> tuple[dict[str, Any], str | None]:
        if call.positional:
            return {}, f"positional values {call.positional!r}: an MCP call names every argument"
        if call.etc:
            return {}, "`...` stands for arguments jobtrail knows: the call must carry them"
        arguments = dict(call.named)
        for name, value in call.named.items():
            if value is ...:
                if name not in self.fill:
                    return {}, f"{name}=... is blank, and jobtrail knows its value"
                arguments[name] = self.fill[name]
        return arguments, None


def sandbox_service(world: JobService) -> JobService:
    """A service on a copy of `world`'s SQLite ledger, as another host's server with no local slot."""
    home = Path(tempfile.mkdtemp(prefix="replay-sandbox-"))
    copy = home / "ledger.sqlite"
    source = sqlite3.connect(world.context.ledger.location)
    target = sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    local = LocalBackend(python=sys.executable, max_concurrent=0, host=SANDBOX_HOST)
    return JobService(
        ledger=Ledger(copy), backends={local.name: local}, home=home, job_python=sys.executable, cancel_wait_s=0.5
    )


# A tiny SFT job that logs every step and commits a checkpoint midway: seconds on the tiny model.
TINY = {
    "max_steps": 4,
    "logging_steps": 1,
    "save_steps": 2,
    "per_device_train_batch_size": 2,
    "max_length": 64,
    "learning_rate": 1e-3,
}


@dataclass(frozen=True)
class Jobs:
    """The real jobs the scenarios share (conftest.py's pipeline)."""

    trained: str
    converted: str
    evaluated: str
    failing: str
    follower: str
    submitted: Agent  # the session that submitted them, and replayed what its replies proposed


@dataclass
class World:
    """The scenarios' shared state: the service, the portal the agents' sessions run on, the paths they use."""

    service: JobService
    portal: BlockingPortal
    model: Path
    dataset: Path
    root: Path
    jobs: dict[str, str] = field(default_factory=dict)

    agents: list[Agent] = field(default_factory=list)

    def agent(self, **fill: Any) -> Agent:
        made = Agent(self.service, self.portal, {"dataset": str(self.dataset), "model": str(self.model), **fill})
        self.agents.append(made)
        return made

    def close(self) -> None:
        for agent in self.agents:
            agent.close()


def portal() -> Any:
    return start_blocking_portal()


TOOLS = frozenset(
    {
        "submit",
        "ps",
        "inspect",
        "logs",
        "cancel",
        "release",
        "retry",
        "evaluate",
        "convert_gguf",
        "report",
        "wait",
        "metrics",
        "plot",
        "validate_dataset",
        "hardware",
        "estimate_cost",
    }
)


def add_record(
    world: World,
    reason: TerminationReason | None,
    *,
    method: str = "sft",
    hyperparameters: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    run: dict[str, Any] | None = None,
    task: Conversion | None = None,
    dataset: Path | None = None,
    **attempt: Any,
) -> str:
    """A run written straight into the world's ledger, planned by preflight on the tiny model and data (a
    conversion's `task` on the model), whose one attempt ended with `reason` (None: still queued) on the world's
    host: what a job that ended that way leaves behind, without running one. `run` sets RunRecord fields."""
    run_id = new_run_id()
    if task is not None:
        job = JobSpec(method="convert_gguf", model=str(world.model), dataset="", **(spec or {}))
    else:
        hyper = {"max_steps": 8, "learning_rate": 1e-3, **(hyperparameters or {})}
        job = JobSpec(
            method=method,
            model=str(world.model),
            dataset=str(dataset or world.dataset),
            hyperparameters=hyper,
            **(spec or {}),
        )
    planned = plan(job.model_copy(update={"after": None}), world.service.context.plan_env(run_id), task)
    assert planned.config is not None, planned.findings
    record = RunRecord(
        run_id=run_id,
        created_at=time.time(),
        method=job.method,
        model=job.model,
        dataset=job.dataset,
        backend="local",
        spec=job,
        **(run or {}),
    )
    world.service.ledger.add_run(record, _attempt(world, run_id, 1, reason, job, planned, attempt))
    return run_id


def add_attempt(world: World, run_id: str, reason: TerminationReason, **attempt: Any) -> None:
    """The run's next attempt, ended with `reason`, running the config and script of its latest."""
    latest = world.service.ledger.attempts(run_id)[-1]
    config, script = latest.config, world.service.ledger.script(latest.script_sha256)
    fields = {"config": config, "script": script, "spec": latest.spec}
    world.service.ledger.add_attempt(
        _attempt(world, run_id, latest.number + 1, reason, None, None, {**fields, **attempt})
    )


def _attempt(
    world: World,
    run_id: str,
    number: int,
    reason: TerminationReason | None,
    job: JobSpec | None,
    planned: Any,
    fields: dict[str, Any],
) -> NewAttempt:
    now = time.time()
    config = fields.pop("config", planned.config if planned else None)
    script = fields.pop("script", planned.script if planned else "")
    ended = (
        {"status": reason.status, "termination_reason": reason, "ended_at": now, "started_at": now - 50}
        if reason
        else {}
    )
    return new_attempt(
        config=config,
        script=script,
        **{
            "attempt_id": f"{run_id}/{number}",
            "run_id": run_id,
            "number": number,
            "status": JobStatus.QUEUED,
            "created_at": now - 60,
            "backend": "local",
            "host": WORLD_HOST,
            "output_dir": world.service.context.output_dir(run_id, config),
            "spec": job,
            "findings": planned.findings if planned else [],
            **ended,
            **fields,
        },
    )


def add_events(world: World, attempt_id: str, *events: dict[str, Any]) -> None:
    """Events a job printed (alerts, steps), recorded as the tracker ingests them from its log."""
    stamped = [{"time": time.time(), **e} for e in events]
    offset = world.service.context.attempt(attempt_id).log_offset
    assert world.service.ledger.ingest(
        attempt_id, from_offset=offset, to_offset=offset + 1, events=stamped, fields={}, checkpoints=[]
    )


def calls_of(reply: Reply) -> list[str]:
    """The calls `reply` proposes (proposals), for a scenario's own checks."""
    return proposals(reply)


def assert_replays(agent: Agent) -> None:
    """Every call the agent's replies proposed, sent as written when it was proposed, was accepted."""
    failed = agent.failures
    assert not failed, f"{len(failed)} of {agent.replayed} proposed calls did not work:\n" + "\n".join(map(str, failed))


def load_watch() -> Any:
    """The job side's run watch (scripts/_watch.py), which writes the alerts a record carries as a job would."""
    return load_script_module("_watch")
