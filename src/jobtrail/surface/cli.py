"""`jobtrail` command line: `serve`, `demo`, `dashboard`, `explain` and `ledger`, plus one subcommand per tool.

A tool's subcommand is built from the tool's own declaration (tools_*.py, params.py): the same
argument names as flags, the same choices, defaults and checks, and it calls the same tool
function. It prints the same markdown as the tool (tables for lists) or, with --json, its
structured content, each tool call a result proposes written as the command that makes it
(`jobtrail retry jt-1 --changes '{...}'`, not `retry(job_id=...)`). Errors print the message and
the fix and exit with status 2; `wait` exits by how the job stands (WAIT_EXIT_STATUS).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobtrail.errors import InvalidRequestError, JobtrailError
from jobtrail.results.endings import blocking
from jobtrail.surface.cli_calls import Call, parse_call, rewrite_calls
from jobtrail.surface.cli_flags import add_tool_arguments, argument_words, tool_arguments
from jobtrail.surface.cli_ledger import add_ledger_commands
from jobtrail.surface.reporting import reporting_to
from jobtrail.surface.tools_data import PlanningTools
from jobtrail.surface.tools_jobs import JobTools
from jobtrail.surface.tools_tasks import TaskTools
from jobtrail.surface.tools_watch import WatchTools
from jobtrail.surface.toolspec import ToolArea, ToolSpec, tool_spec
from jobtrail.util.hub import one_line_error

if TYPE_CHECKING:
    from jobtrail.service.change_feed import ChangeFeed
    from jobtrail.service.facade import JobService

Handler = Callable[[argparse.Namespace], int]
FOLLOW_CHUNK = 1000  # lines per read while following a log


def main(argv: Sequence[str] | None = None) -> int:
    # Whatever this command creates (the home, the demo's model, a dashboard's files) is the user's alone;
    # the server's own writes under the home are made private explicitly too (util/files.py).
    os.umask(0o077)
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except JobtrailError as exc:
        print(f"error: {cli_text(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a person reads this: one line, never a traceback
        print(f"error: jobtrail failed unexpectedly ({one_line_error(exc)}).", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobtrail", description="Fine-tuning jobs with preflight checks and receipts."
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    _serve_and_demo(sub)
    for command in TOOL_COMMANDS:
        made = _tool_command(sub, command)
        if command.tool == "logs":
            made.add_argument("--follow", action="store_true", help="keep printing until the job ends")

    dashboard = sub.add_parser(
        "dashboard",
        help="open trackio's dashboard on the local jobs' runs",
        description="Serve trackio's dashboard on $JOBTRAIL_HOME/trackio, where every local training job reports "
        "(a remote job's run is in its private Space: inspect gives the URL). Stop it with Ctrl-C.",
    )
    dashboard.add_argument("--project", help="the trackio project to show (inspect's trackio.project); default: all")
    dashboard.add_argument("--port", type=int, help="the port to serve on (default: trackio's, 7860 or the next free)")
    dashboard.add_argument("--no-browser", action="store_true", help="serve without opening a browser tab")
    dashboard.add_argument(
        "--print", dest="print_only", action="store_true", help="print the trackio folder and call; start nothing"
    )
    dashboard.set_defaults(handler=_dashboard)

    add_ledger_commands(sub)
    explain = sub.add_parser("explain", help="why did a job end? classify any log file")
    explain.add_argument("logfile")
    explain.add_argument("--exit-code", type=int, help="the process's exit code, if known")
    explain.add_argument("--signal", type=int, help="the signal that killed it, if known")
    _json_flag(explain)
    explain.set_defaults(handler=_explain)
    return parser


def _serve_and_demo(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    serve.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at http://HOST:PORT/mcp; beyond loopback only with JOBTRAIL_AUTH_TOKEN set",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 takes a free one)")
    serve.add_argument(
        "--read-only",
        action="store_true",
        help="open the ledger read-only and change nothing (JOBTRAIL_READ_ONLY=1): ps, inspect, logs, metrics and "
        "wait answer; a damaged ledger is read this way while it is saved",
    )
    serve.set_defaults(handler=_serve)

    demo = sub.add_parser("demo", help="train a tiny model with LoRA SFT on this machine, end to end")
    demo.add_argument("--prepare", action="store_true", help="only build the tiny model and dataset")
    demo.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    demo.add_argument("--json", action="store_true", help="print JSON instead of text")
    demo.set_defaults(handler=_demo)


@dataclass(frozen=True)
class ToolCall:
    """What a tool's subcommand runs: the tool, and the dict argument that `--set NAME=VALUE` adds to."""

    area: type[ToolArea]
    spec: ToolSpec
    overrides: str | None = None

    def run(self, args: argparse.Namespace, **fixed: Any) -> Any:
        """The tool on the parsed arguments (and on `fixed` ones the command decides)."""
        arguments = tool_arguments(args, self.spec)
        if self.overrides:
            merged = {**(arguments[self.overrides] or {}), **dict(_override(item) for item in args.overrides)}
            arguments[self.overrides] = merged or None
        tools = self.area(_service())
        return getattr(tools, self.spec.name)(**arguments, **fixed)


@dataclass(frozen=True)
class ToolCommand:
    """A subcommand calling one tool, its flags made from the tool's parameters; `positional`, `one_of` and
    `skip` lay them out (see add_tool_arguments)."""

    area: type[ToolArea]
    tool: str
    name: str | None = None
    positional: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    handler: Handler | None = None
    overrides: str | None = None
    help_line: str | None = None
    epilog: str | None = None

    @property
    def command(self) -> str:
        return self.name or self.tool.replace("_", "-")


def _tool_command(sub: Any, declared: ToolCommand) -> argparse.ArgumentParser:
    spec = tool_spec(declared.area, declared.tool)
    command: argparse.ArgumentParser = sub.add_parser(
        declared.command,
        help=declared.help_line or f"{spec.info.title} (the {declared.tool} tool)",
        description=spec.info.description,
        epilog=declared.epilog,
    )
    add_tool_arguments(command, spec, positional=declared.positional, one_of=declared.one_of, skip=declared.skip)
    if declared.overrides:
        command.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=f"one entry of --{declared.overrides} (repeatable); VALUE is read as JSON when it parses",
        )
    _json_flag(command)
    command.set_defaults(handler=declared.handler or _show, tool=ToolCall(declared.area, spec, declared.overrides))
    return command


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the structured content as JSON")


def _service() -> JobService:
    from jobtrail.app import build_service  # imported when a command runs, not to build the parser

    return build_service()


def _emit(args: argparse.Namespace, result: Any) -> int:
    if args.json:
        print(json.dumps(_cli_content(result.model_dump(mode="json")), indent=2, ensure_ascii=False))
    else:
        print(cli_text(result.to_markdown()))
    return 0


def cli_text(text: str) -> str:
    """`text` with each tool call it proposes written as the command that makes it."""
    return rewrite_calls(text, {c.tool for c in TOOL_COMMANDS}, command_line)


def _cli_content(data: dict[str, Any]) -> dict[str, Any]:
    """A result's structured content as the CLI prints it: its summary, and each next step that is a tool call,
    as commands (kind "shell")."""
    if isinstance(data.get("summary"), str):
        data["summary"] = cli_text(data["summary"])
    for step in data.get("next_steps") or []:
        call = parse_call(step["call"]) if step.get("kind") == "tool" and step.get("call") else None
        command = command_line(call) if call is not None else None
        if command is not None:
            step.update(kind="shell", call=command)
    return data


def command_line(call: Call) -> str | None:
    """The `jobtrail ...` command that makes `call`, from the declaration its subcommand's flags are made from;
    None for a call no command makes as written (an argument the tool lacks, a value no flag gives)."""
    declared = next((c for c in TOOL_COMMANDS if c.tool == call.tool), None)
    if declared is None:
        return None
    parameters = {q.name: q for q in tool_spec(declared.area, declared.tool).parameters}
    unnamed = [name for name in parameters if name not in call.named]
    if len(call.positional) > len(unnamed):
        return None
    given = {**dict(zip(unnamed, call.positional, strict=False)), **call.named}
    if not set(given) <= set(parameters):
        return None
    head: list[str] = []
    flags: list[str] = []
    for name, value in given.items():
        positional = name in declared.positional
        said = argument_words(parameters[name], value, positional=positional)
        if said is None:
            return None
        (head if positional else flags).extend(said)
    return shlex.join(["jobtrail", declared.command, *head, *(["..."] if call.etc else []), *flags])


def _override(item: str) -> tuple[str, Any]:
    name, sep, raw = item.partition("=")
    if not sep or not name:
        raise InvalidRequestError(f"--set {item!r} is not NAME=VALUE.", fix="Write it like --set max_steps=100")
    try:
        return name.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return name.strip(), raw


def _show(args: argparse.Namespace) -> int:
    return _emit(args, args.tool.run(args))


def _submit(args: argparse.Namespace) -> int:
    result = args.tool.run(args)
    _emit(args, result)
    return 1 if result.status == "rejected" else 0


def _retry(args: argparse.Namespace) -> int:
    result = args.tool.run(args)
    _emit(args, result)
    return 0 if result.retried else 1


def _preflight(args: argparse.Namespace) -> int:
    result = args.tool.run(args, dry_run=True).model_copy(update={"script": None})
    _emit(args, result)
    return 1 if any(f.severity == "error" for f in result.findings) else 0


# `jobtrail wait`'s exit status: how the job stands when the wait returns, one code each (printed by `wait --help`;
# README's CLI section lists them). 2 is every command's: the command itself was refused.
WAIT_EXIT_STATUS: tuple[tuple[int, str], ...] = (
    (0, "succeeded, with no blocking alert"),
    (1, "failed (any termination reason: inspect says which)"),
    (2, "the command was refused (an unknown job id, a wrong flag)"),
    (3, "cancelled"),
    (4, "succeeded with a blocking alert: its result is not usable as it is"),
    (5, "still queued or running when the wait ended: run it again"),
)


def _wait(args: argparse.Namespace) -> int:
    """How the job stands, as WAIT_EXIT_STATUS says: a shell can branch on it, or loop while it is 5."""
    shown: list[str] = []

    def show(done: float, total: float, message: str) -> None:
        if message not in shown[-1:]:  # a line per change, not per second
            print(f"[{done:.0f}/{total:.0f} s] {message}", file=sys.stderr, flush=True)
            shown.append(message)

    with reporting_to(show):
        result = args.tool.run(args)
    _emit(args, result)
    if not result.terminal:
        return 5
    if result.status == "succeeded":
        return 4 if blocking(result.alerts) else 0
    return 3 if result.status == "cancelled" else 1


def _wait_epilog() -> str:
    return "Exit status: " + "; ".join(f"{code} {meaning}" for code, meaning in WAIT_EXIT_STATUS) + "."


def _plot(args: argparse.Namespace) -> int:
    """The PNG's path alone (a person opens it), or the result as JSON."""
    result = args.tool.run(args)
    print(result.model_dump_json(indent=2) if args.json else result.path)
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    """trackio.show on the local jobs' trackio folder (trackio reads TRACKIO_DIR when it is imported)."""
    from jobtrail.app import home
    from jobtrail.service.context import trackio_dir

    folder = trackio_dir(home())
    call = f"trackio.show(project={args.project!r}, open_browser={not args.no_browser}, server_port={args.port!r})"
    if args.print_only:
        print(f"TRACKIO_DIR={folder}\n{call}")
        return 0
    os.environ["TRACKIO_DIR"] = str(folder)
    try:
        import trackio
        from trackio.sqlite_storage import SQLiteStorage
    except ImportError as exc:
        raise InvalidRequestError(
            f"trackio is not installed here ({exc}).", fix="pip install 'jobtrail[train]' (it brings trackio)."
        ) from exc
    projects = SQLiteStorage.get_projects() if folder.is_dir() else []
    if args.project and args.project not in projects:
        where = f"{folder} holds {', '.join(sorted(projects))}" if projects else f"{folder} holds no trackio runs yet"
        raise InvalidRequestError(
            f"No trackio project {args.project!r}: {where}.",
            fix="Pass --project as inspect's trackio.project of a local job, or leave it out to see them all.",
        )
    trackio.show(project=args.project, open_browser=not args.no_browser, server_port=args.port, block_thread=True)
    return 0


def _explain(args: argparse.Namespace) -> int:
    from pathlib import Path

    from jobtrail.errors import NotFoundError
    from jobtrail.outcomes.classify import explain

    path = Path(args.logfile)
    if not path.is_file():
        raise NotFoundError(
            f"No log file at {path}.",
            fix="Pass the path of a job log, e.g. $JOBTRAIL_HOME/runs/<job_id>/attempt-1/job.log",
        )
    verdict = explain(path.read_text(errors="replace"), args.exit_code, args.signal)
    data = {"reason": verdict.reason.value, "message": verdict.message, "evidence": verdict.evidence}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(f"{data['reason']}: {data['message']}" + (f"\nEvidence: {verdict.evidence}" if verdict.evidence else ""))
    return 0


def _logs(args: argparse.Namespace) -> int:
    tools = JobTools(_service())
    result = tools.logs(**tool_arguments(args, args.tool.spec))
    if not args.follow:
        return _emit(args, result)
    while True:
        for line in result.lines:
            print(line, flush=True)
        if result.finished:
            return 0
        time.sleep(1.0)  # a person is watching; one read a second is plenty
        result = tools.logs(args.job_id, tail=FOLLOW_CHUNK, cursor=result.cursor)


# One subcommand per tool (preflight: submit's dry run without the script), made from the tool's declaration.
TOOL_COMMANDS: tuple[ToolCommand, ...] = (
    ToolCommand(JobTools, "submit", handler=_submit, overrides="hyperparameters"),
    ToolCommand(
        JobTools,
        "submit",
        name="preflight",
        handler=_preflight,
        overrides="hyperparameters",
        skip=("dry_run", "force", "max_retries", "include_script", "idempotency_key"),
        help_line="run every preflight check for a job without submitting it",
    ),
    ToolCommand(PlanningTools, "validate_dataset", positional=("dataset",)),
    ToolCommand(PlanningTools, "hardware"),
    ToolCommand(PlanningTools, "estimate_cost", name="estimate", positional=("model",)),
    ToolCommand(JobTools, "ps"),
    ToolCommand(JobTools, "inspect", positional=("job_id",)),
    ToolCommand(JobTools, "logs", positional=("job_id",), handler=_logs),
    ToolCommand(WatchTools, "wait", positional=("job_id",), handler=_wait, epilog=_wait_epilog()),
    ToolCommand(WatchTools, "metrics", positional=("job_id",)),
    ToolCommand(WatchTools, "plot", positional=("job_id",), handler=_plot),
    ToolCommand(JobTools, "cancel", positional=("job_id",)),
    ToolCommand(JobTools, "release", positional=("job_id",)),
    ToolCommand(JobTools, "retry", positional=("job_id",), handler=_retry, overrides="changes"),
    ToolCommand(TaskTools, "evaluate", positional=("dataset",), one_of=("job_id", "model")),
    ToolCommand(TaskTools, "convert_gguf", positional=("source",)),
    ToolCommand(TaskTools, "report"),
)


def _serve(args: argparse.Namespace) -> int:
    # Starting allocates much and frees little (the SDK's modules, the tools' models and schemas): the collector
    # would walk all of it again and again (~8% of a start). Frozen once built, it is never walked while serving.
    gc.disable()
    try:
        from jobtrail.app import READ_ONLY_ENV, change_feed, ledger_location, on_first_use, settings
        from jobtrail.surface.server import build_server

        token = None
        if args.http:
            from jobtrail.surface.http_server import auth_token, serve_http

            token = auth_token(args.host)  # refuses an exposed address without a token, before anything starts
        if args.read_only:
            os.environ[READ_ONLY_ENV] = "1"
        # Settings are checked now (a wrong one stops the start); the service is built on first use, so the
        # client's tools/list is answered without the planner, estimator, templates and classifier it brings.
        config = settings()
        if not config.read_only:
            from jobtrail.ledger.db import check

            check(ledger_location(config.home))  # a damaged ledger stops the start, saying the way back
        service = on_first_use(config)
        feed = change_feed(config, service)
        server = build_server(service, feed)
    finally:
        gc.freeze()
        gc.enable()
    _start_poller(service, feed)
    if args.http:
        serve_http(server, args.host, args.port, token)
    else:
        server.run()
    return 0


def _start_poller(service: Callable[[], JobService], feed: ChangeFeed, interval_s: float = 1.0) -> None:
    """Advance the queue and record exits even while no tool is being called, then tell the change feed's listeners
    (resource subscribers, the webhook) what changed. Its first round comes an interval after the start, and builds
    the service unless a tool call has: the start is the client's to have answered."""

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            try:
                built = service()
                built.refresh()
                feed.look(built.context)
            except Exception as exc:  # noqa: BLE001  the poller must outlive a bad moment (e.g. a locked ledger)
                print(f"jobtrail poller: {type(exc).__name__}: {exc}", file=sys.stderr)

    threading.Thread(target=loop, name="jobtrail-poller", daemon=True).start()


def _demo(args: argparse.Namespace) -> int:
    from jobtrail.demo.run import run_demo

    return run_demo(prepare_only=args.prepare, steps=args.steps, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
