"""`jobtrail` command line: `serve`, `demo`, `dashboard`, `explain` and `ledger`, plus one subcommand per tool.

A tool's subcommand is built from the tool's own declaration (tools_*.py, params.py): the same
argument names as flags, the same choices, defaults and checks, and it calls the same tool
function. It prints the same markdown as the tool (tables for lists) or, with --json, its
structured content. Errors print the message and the fix and exit with status 2.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobtrail.errors import InvalidRequestError, JobtrailError
from jobtrail.surface.cli_flags import add_tool_arguments, tool_arguments
from jobtrail.surface.cli_ledger import add_ledger_commands
from jobtrail.surface.reporting import reporting_to
from jobtrail.surface.tools_data import PlanningTools
from jobtrail.surface.tools_jobs import JobTools
from jobtrail.surface.tools_tasks import TaskTools
from jobtrail.surface.tools_watch import WatchTools
from jobtrail.surface.toolspec import ToolArea, ToolSpec, tool_spec
from jobtrail.util.hub import one_line_error

if TYPE_CHECKING:
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
        print(f"error: {exc}", file=sys.stderr)
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
    _tool_command(sub, JobTools, "submit", handler=_submit, overrides="hyperparameters")
    _tool_command(
        sub,
        JobTools,
        "submit",
        name="preflight",
        handler=_preflight,
        overrides="hyperparameters",
        skip=("dry_run", "force", "max_retries", "include_script", "idempotency_key"),
        help_line="run every preflight check for a job without submitting it",
    )
    _tool_command(sub, PlanningTools, "validate_dataset", positional=("dataset",))
    _tool_command(sub, PlanningTools, "hardware")
    _tool_command(sub, PlanningTools, "estimate_cost", name="estimate", positional=("model",))
    _tool_command(sub, JobTools, "ps")
    _tool_command(sub, JobTools, "inspect", positional=("job_id",))
    logs = _tool_command(sub, JobTools, "logs", positional=("job_id",), handler=_logs)
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")
    _tool_command(sub, WatchTools, "wait", positional=("job_id",), handler=_wait)
    _tool_command(sub, WatchTools, "metrics", positional=("job_id",))
    _tool_command(sub, WatchTools, "plot", positional=("job_id",), handler=_plot)
    _tool_command(sub, JobTools, "cancel", positional=("job_id",))
    _tool_command(sub, JobTools, "release", positional=("job_id",))
    _tool_command(sub, JobTools, "retry", positional=("job_id",), handler=_retry, overrides="changes")
    _tool_command(sub, TaskTools, "evaluate", positional=("dataset",), one_of=("job_id", "model"))
    _tool_command(sub, TaskTools, "convert_gguf", positional=("source",))
    _tool_command(sub, TaskTools, "report")

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


def _tool_command(
    sub: Any,
    area: type[ToolArea],
    tool: str,
    *,
    name: str | None = None,
    help_line: str | None = None,
    handler: Handler | None = None,
    overrides: str | None = None,
    **layout: Any,
) -> argparse.ArgumentParser:
    """A subcommand calling one tool, its flags made from the tool's parameters (`layout`: see add_tool_arguments)."""
    spec = tool_spec(area, tool)
    command: argparse.ArgumentParser = sub.add_parser(
        name or tool.replace("_", "-"),
        help=help_line or f"{spec.info.title} (the {tool} tool)",
        description=spec.info.description,
    )
    add_tool_arguments(command, spec, **layout)
    if overrides:
        command.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=f"one entry of --{overrides} (repeatable); VALUE is read as JSON when it parses",
        )
    _json_flag(command)
    command.set_defaults(handler=handler or _show, tool=ToolCall(area, spec, overrides))
    return command


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the structured content as JSON")


def _service() -> JobService:
    from jobtrail.app import build_service  # imported when a command runs, not to build the parser

    return build_service()


def _emit(args: argparse.Namespace, result: Any) -> int:
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(result.to_markdown())
    return 0


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


def _wait(args: argparse.Namespace) -> int:
    """Exit status 0 once the job has ended (whatever its status), 1 while it still runs: a shell can loop on it."""
    shown: list[str] = []

    def show(done: float, total: float, message: str) -> None:
        if message not in shown[-1:]:  # a line per change, not per second
            print(f"[{done:.0f}/{total:.0f} s] {message}", file=sys.stderr, flush=True)
            shown.append(message)

    with reporting_to(show):
        result = args.tool.run(args)
    _emit(args, result)
    return 0 if result.terminal else 1


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


def _serve(args: argparse.Namespace) -> int:
    # Starting allocates much and frees little (the SDK's modules, the tools' models and schemas): the collector
    # would walk all of it again and again (~8% of a start). Frozen once built, it is never walked while serving.
    gc.disable()
    try:
        from jobtrail.app import on_first_use, settings
        from jobtrail.surface.server import build_server

        token = None
        if args.http:
            from jobtrail.surface.http_server import auth_token, serve_http

            token = auth_token(args.host)  # refuses an exposed address without a token, before anything starts
        # Settings are checked now (a wrong one stops the start); the service is built on first use, so the
        # client's tools/list is answered without the planner, estimator, templates and classifier it brings.
        service = on_first_use(settings())
        server = build_server(service)
    finally:
        gc.freeze()
        gc.enable()
    _start_poller(service)
    if args.http:
        serve_http(server, args.host, args.port, token)
    else:
        server.run()
    return 0


def _start_poller(service: Callable[[], JobService], interval_s: float = 1.0) -> None:
    """Advance the queue and record exits even while no tool is being called. Its first round comes an interval
    after the start, and builds the service unless a tool call has: the start is the client's to have answered."""

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            try:
                service().refresh()
            except Exception as exc:  # noqa: BLE001  the poller must outlive a bad moment (e.g. a locked ledger)
                print(f"jobtrail poller: {type(exc).__name__}: {exc}", file=sys.stderr)

    threading.Thread(target=loop, name="jobtrail-poller", daemon=True).start()


def _demo(args: argparse.Namespace) -> int:
    from jobtrail.demo.run import run_demo

    return run_demo(prepare_only=args.prepare, steps=args.steps, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
