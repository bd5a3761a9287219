"""`jobtrail` command line: `serve` and `demo`, plus one subcommand per tool.

Subcommands print the same markdown as the tool (tables for lists) or, with --json, its
structured content. Errors print the message and the fix and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from jobtrail.errors import InvalidRequestError, JobtrailError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except JobtrailError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobtrail", description="Fine-tuning jobs with preflight checks and receipts.")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(handler=_serve)

    demo = sub.add_parser("demo", help="train a tiny model with LoRA SFT on this machine, end to end")
    demo.add_argument("--prepare", action="store_true", help="only build the tiny model and dataset")
    demo.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    demo.add_argument("--json", action="store_true", help="print JSON instead of text")
    demo.set_defaults(handler=_demo)

    submit = sub.add_parser("submit", help="submit a training job (the submit tool)")
    _job_arguments(submit)
    submit.add_argument("--dry-run", action="store_true", help="render and check only; print the script too")
    submit.add_argument("--force", action="store_true", help="submit despite blocking findings (recorded)")
    submit.add_argument("--max-retries", type=int, default=0, help="retry automatically within the reason budgets")
    _json_flag(submit)
    submit.set_defaults(handler=_submit)

    preflight = sub.add_parser("preflight", help="run every preflight check for a job without submitting it")
    _job_arguments(preflight)
    _json_flag(preflight)
    preflight.set_defaults(handler=_preflight)

    validate = sub.add_parser("validate-dataset", help="check a dataset's format for each method (the validate_dataset tool)")
    validate.add_argument("dataset", metavar="PATH_OR_ID")
    validate.add_argument("--method", choices=["sft", "dpo", "grpo", "reward", "kto"])
    validate.add_argument("--split", default="train")
    validate.add_argument("--model", help="local model directory, to measure token lengths")
    validate.add_argument("--max-length", type=int)
    _json_flag(validate)
    validate.set_defaults(handler=lambda a: _emit(a, _service().validate_dataset(a.dataset, a.method, a.split, a.model, a.max_length)))

    hardware = sub.add_parser("hardware", help="HF Jobs flavors with prices (the hardware tool)")
    _json_flag(hardware)
    hardware.set_defaults(handler=lambda a: _emit(a, _service().hardware()))

    estimate = sub.add_parser("estimate", help="memory, time and cost of a job (the estimate_cost tool)")
    estimate.add_argument("model")
    estimate.add_argument("--method", default="sft", choices=["sft", "dpo", "grpo", "reward", "kto"])
    estimate.add_argument("--peft", default="lora", choices=["lora", "qlora", "none"])
    estimate.add_argument("--dataset")
    estimate.add_argument("--num-examples", type=int)
    estimate.add_argument("--avg-tokens", type=float)
    estimate.add_argument("--max-length", type=int, default=1024)
    estimate.add_argument("--per-device-batch-size", type=int, default=1)
    estimate.add_argument("--gradient-accumulation-steps", type=int, default=1)
    estimate.add_argument("--epochs", type=int, default=1)
    estimate.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    estimate.add_argument("--flavor")
    estimate.add_argument("--lora-r", type=int, default=16)
    estimate.add_argument("--optimizer", default="adamw")
    _json_flag(estimate)
    estimate.set_defaults(handler=_estimate)

    ps = sub.add_parser("ps", help="list jobs (the ps tool)")
    ps.add_argument("--status", choices=["queued", "starting", "running", "succeeded", "failed", "cancelled"])
    ps.add_argument("--limit", type=int, default=20)
    _json_flag(ps)
    ps.set_defaults(handler=lambda a: _emit(a, _service().ps(status=a.status, limit=a.limit)))

    inspect = sub.add_parser("inspect", help="a job's status and receipt (the inspect tool)")
    inspect.add_argument("job_id")
    _json_flag(inspect)
    inspect.set_defaults(handler=lambda a: _emit(a, _service().inspect(a.job_id)))

    logs = sub.add_parser("logs", help="a job's log lines (the logs tool)")
    logs.add_argument("job_id")
    logs.add_argument("--tail", type=int, default=50)
    logs.add_argument("--cursor", type=int)
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")
    _json_flag(logs)
    logs.set_defaults(handler=_logs)

    cancel = sub.add_parser("cancel", help="stop a job (the cancel tool)")
    cancel.add_argument("job_id")
    _json_flag(cancel)
    cancel.set_defaults(handler=lambda a: _emit(a, _service().cancel(a.job_id)))
    retry = sub.add_parser("retry", help="start a new attempt of a job within its retry budget (the retry tool)")
    retry.add_argument("job_id")
    retry.add_argument("--changes", type=_json_object, default={}, help="JSON object of changes")
    retry.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    _json_flag(retry)
    retry.set_defaults(handler=_retry)

    evaluate = sub.add_parser("evaluate", help="evaluate a job's checkpoint or a model (the evaluate tool)")
    evaluate.add_argument("dataset")
    target = evaluate.add_mutually_exclusive_group(required=True)
    target.add_argument("--job-id")
    target.add_argument("--model")
    evaluate.add_argument("--split")
    evaluate.add_argument("--checkpoint")
    evaluate.add_argument("--metrics", nargs="+", choices=["loss", "perplexity", "exact_match", "pairwise_accuracy"])
    evaluate.add_argument("--max-new-tokens", type=int, default=64)
    evaluate.add_argument("--temperature", type=float, default=0.0)
    _json_flag(evaluate)
    evaluate.set_defaults(handler=lambda a: _emit(a, _service().evaluate(
        a.dataset, job_id=a.job_id, model=a.model, split=a.split, checkpoint=a.checkpoint, metrics=a.metrics,
        max_new_tokens=a.max_new_tokens, temperature=a.temperature)))

    convert = sub.add_parser("convert-gguf", help="convert a job's model or a directory to GGUF (the convert_gguf tool)")
    convert.add_argument("source", help="job id, model/adapter directory or Hub id")
    convert.add_argument("--quantizations", nargs="+", default=["Q4_K_M"])
    convert.add_argument("--output")
    convert.add_argument("--backend", default="local", choices=["local", "hf-jobs"])
    convert.add_argument("--checkpoint")
    convert.add_argument("--pre-tokenizer")
    _json_flag(convert)
    convert.set_defaults(handler=lambda a: _emit(a, _service().convert_gguf(
        a.source, a.quantizations, output=a.output, backend=a.backend, checkpoint=a.checkpoint, pre_tokenizer=a.pre_tokenizer)))

    report = sub.add_parser("report", help="attempts, GPU-hours and cost by termination reason (the report tool)")
    report.add_argument("--days", type=float, default=7)
    report.add_argument("--group-by", default="termination_reason",
                        choices=["termination_reason", "method", "backend", "flavor", "model"])
    _json_flag(report)
    report.set_defaults(handler=lambda a: _emit(a, _service().report(days=a.days, group_by=a.group_by)))

    explain = sub.add_parser("explain", help="why did a job end? classify any log file")
    explain.add_argument("logfile")
    explain.add_argument("--exit-code", type=int, help="the process's exit code, if known")
    explain.add_argument("--signal", type=int, help="the signal that killed it, if known")
    _json_flag(explain)
    explain.set_defaults(handler=_explain)
    return parser


def _job_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", required=True, choices=["sft", "dpo", "grpo", "reward", "kto"])
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--backend", default="local", choices=["local", "hf-jobs"])
    p.add_argument("--flavor")
    p.add_argument("--timeout", help="e.g. 45m, 2h, or seconds")
    p.add_argument("--hyperparameters", type=_json_object, default={}, help="JSON object of TRL config names")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="one hyperparameter (repeatable); VALUE is read as JSON when it parses")
    p.add_argument("--output")
    p.add_argument("--dataset-mapping", type=_json_object, help="JSON mapping proposed by validate-dataset")
    p.add_argument("--eval-dataset", help="held-out data: evaluate the base model before and the final model after")
    p.add_argument("--reward-file", help="GRPO: Python file with the reward function")
    p.add_argument("--reward-function", help="GRPO: the function's name in --reward-file")


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the structured content as JSON")


def _service():  # noqa: ANN202 - imported lazily so `jobtrail --help` stays instant
    from jobtrail.app import build_service

    return build_service()


def _emit(args: argparse.Namespace, result: Any) -> int:
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(result.to_markdown())
    return 0


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg}); write it like '{{\"max_steps\": 10}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"max_steps\": 10}'")
    return value


def _override(item: str) -> tuple[str, Any]:
    name, sep, raw = item.partition("=")
    if not sep or not name:
        raise InvalidRequestError(f"--set {item!r} is not NAME=VALUE.", fix="Write it like --set max_steps=100")
    try:
        return name.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return name.strip(), raw


def _spec(args: argparse.Namespace):  # noqa: ANN202 - JobSpec, imported lazily
    from jobtrail.models import JobSpec
    from jobtrail.util.timefmt import parse_duration

    hyperparameters = dict(args.hyperparameters)
    hyperparameters.update(_override(item) for item in args.overrides)
    return JobSpec(
        method=args.method,
        model=args.model,
        dataset=args.dataset,
        backend=args.backend,
        flavor=args.flavor,
        timeout_s=parse_duration(args.timeout),
        hyperparameters=hyperparameters,
        dataset_mapping=args.dataset_mapping,
        output=args.output,
        reward_file=args.reward_file,
        reward_function=args.reward_function,
        eval_dataset=args.eval_dataset,
    )


def _submit(args: argparse.Namespace) -> int:
    result = _service().submit(_spec(args), dry_run=args.dry_run, force=args.force, max_retries=args.max_retries)
    _emit(args, result)
    return 1 if result.status == "rejected" else 0


def _estimate(args: argparse.Namespace) -> int:
    names = ("method", "peft", "dataset", "num_examples", "avg_tokens", "max_length", "per_device_batch_size",
             "gradient_accumulation_steps", "epochs", "gradient_checkpointing", "flavor", "lora_r", "optimizer")
    return _emit(args, _service().estimate_cost(args.model, **{name: getattr(args, name) for name in names}))


def _retry(args: argparse.Namespace) -> int:
    changes = dict(args.changes)
    changes.update(_override(item) for item in args.overrides)
    result = _service().retry(args.job_id, changes or None)
    _emit(args, result)
    return 0 if result.retried else 1


def _preflight(args: argparse.Namespace) -> int:
    result = _service().submit(_spec(args), dry_run=True).model_copy(update={"script": None})
    _emit(args, result)
    return 1 if any(f.severity == "error" for f in result.findings) else 0


def _explain(args: argparse.Namespace) -> int:
    from pathlib import Path

    from jobtrail.outcomes.classify import explain
    from jobtrail.errors import NotFoundError

    path = Path(args.logfile)
    if not path.is_file():
        raise NotFoundError(f"No log file at {path}.", fix="Pass the path of a job log, e.g. $JOBTRAIL_HOME/runs/<job_id>/attempt-1/job.log")
    verdict = explain(path.read_text(errors="replace"), args.exit_code, args.signal)
    data = {"reason": verdict.reason.value, "message": verdict.message, "evidence": verdict.evidence}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(f"{data['reason']}: {data['message']}" + (f"\nEvidence: {verdict.evidence}" if verdict.evidence else ""))
    return 0


def _logs(args: argparse.Namespace) -> int:
    service = _service()
    result = service.logs(args.job_id, tail=args.tail, cursor=args.cursor)
    if not args.follow:
        return _emit(args, result)
    while True:
        for line in result.lines:
            print(line, flush=True)
        if result.finished:
            return 0
        time.sleep(1.0)  # a person is watching; one read a second is plenty
        result = service.logs(args.job_id, tail=1000, cursor=result.cursor)


def _serve(args: argparse.Namespace) -> int:
    from jobtrail.app import build_service
    from jobtrail.surface.server import build_server

    service = build_service()
    _start_poller(service)
    server = build_server(service)
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run()
    return 0


def _start_poller(service: Any, interval_s: float = 1.0) -> None:
    """Advance the queue and record exits even while no tool is being called."""

    def loop() -> None:
        while True:
            try:
                service.refresh()
            except Exception as exc:  # the poller must outlive a bad moment (e.g. a locked ledger)
                print(f"jobtrail poller: {type(exc).__name__}: {exc}", file=sys.stderr)
            time.sleep(interval_s)

    threading.Thread(target=loop, name="jobtrail-poller", daemon=True).start()


def _demo(args: argparse.Namespace) -> int:
    from jobtrail.demo.run import run_demo

    return run_demo(prepare_only=args.prepare, steps=args.steps, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
