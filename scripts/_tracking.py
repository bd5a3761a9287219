"""jobtrail job-side trackio reporting: every Trainer log mirrored to trackio, never at training's cost.

trackio (a local SQLite dashboard, or a Hugging Face Space) is how people watch a TRL run, so every
training job reports to it unless its report_to leaves "trackio" out. jobtrail's own step events stay
the job's record; trackio is a view of them, and a broken view must not end the job. That is why the
job does not use TRL's own integration (report_to="trackio" inside the TRL config): transformers'
TrackioCallback calls trackio.init unguarded when training begins, and TRL's GRPO profiling calls
trackio.log() unguarded, so there a trackio that fails ends the training. Here instead:

- trackio is imported in the config phase, and trackio.init runs in a background thread: training
  starts at once, logs wait in memory until the run exists, and an init that fails or never returns
  (a Space that cannot be created, a token without the rights, no network) is given up after
  INIT_TIMEOUT_S;
- that thread then hands the logs to trackio (trackio.log costs ~100 us of Python a call: type checks,
  a JSON round trip, a uuid), every SEND_EVERY_S: a step only appends its log to a queue, and on a GPU
  the sending runs while the training thread waits for the device;
- each failure (import, init, logs trackio could not persist, finish) becomes one `alert` event with
  code "trackio.failed" (code, step, message, fix, like every alert), and a failed init or log turns
  trackio off for the rest of the job;
- finish waits at most FINISH_TIMEOUT_S; then a local run is read back from trackio's own database,
  so logs that trackio lost say so even when its warning went astray.

The job says where its run goes (a `trackio` event: project, run, group, the folder or the Space) as
it starts, so the receipt links the run whether trackio then works or not.

trackio reports most of its own failures as warnings (warnings.warn, from its sender threads too), not
exceptions: a warnings hook collects those that come from trackio's modules. Events are printed from
the Trainer's hooks only (the main thread), with the step they happened at, and trackio's own prints
(from its threads, and ours) are made whole-line writes, so they never split an event's line.

render.py inlines this file after scripts/_runtime.py into every script that imports it. Like the
other runtime modules it is standard-library only at import time.
"""

import os
import re
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

# --- jobtrail:runtime ---
from _runtime import emit

# --- end jobtrail:runtime ---

TRACKIO = "trackio"
INIT_TIMEOUT_S = 60.0  # from the start of the job's trackio init to giving it up
SEND_EVERY_S = 1.0  # how often the sender thread hands the logs that came to trackio
FINISH_TIMEOUT_S = 60.0  # trackio flushes its queue (uploads, for a Space) before a run finishes
MAX_PENDING_LOGS = 10_000  # logs kept while init runs; past this the oldest go (they are in the step events)
MAX_ALERTS = 3  # trackio.failed alerts per job; trackio's own output in the log says the rest
SPACE_URL = "https://huggingface.co/spaces/{space_id}"
# Per-run totals TRL adds to every log (not a series worth a panel).
SUMMARY_KEYS = ("train_runtime", "total_flos")


def split_report_to(report_to: Any) -> tuple[bool, Any]:
    """(whether the job reports to trackio itself, report_to for the TRL config without trackio).

    A config without report_to reports to trackio (jobtrail's default); "none" or a list without
    "trackio" does not. Other integrations stay TRL's business.
    """
    if report_to is None:
        return True, "none"
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    others = [name for name in names if name not in (TRACKIO, "none")]
    return TRACKIO in names, others or "none"


def trackio_target(config: dict[str, Any], run_id: str, attempt_id: str, model: str) -> dict[str, Any]:
    """Where this attempt's trackio run goes: project, run name, group, Space and bucket.

    The project is the training_args' `project` (TRL's name for it), by default the base model's name,
    so runs of one model compare on one dashboard; the run is named after the job and attempt, and
    grouped by job. A Space (training_args' `trackio_space_id`, else trackio's own TRACKIO_SPACE_ID)
    receives the run instead of the local TRACKIO_DIR.
    """
    training_args = config.get("training_args") or {}
    project = training_args.get("project") or default_project(model)
    number = attempt_id.rsplit("/", 1)[-1] if "/" in attempt_id else None
    return {
        "project": str(project),
        "run": f"{run_id}-attempt-{number}" if number else attempt_id,
        "group": run_id,
        "space_id": training_args.get("trackio_space_id") or os.environ.get("TRACKIO_SPACE_ID") or None,
        "bucket_id": training_args.get("trackio_bucket_id") or None,
    }


def default_project(model: str) -> str:
    """A trackio project name from a model id or directory: its last part ("Qwen2.5-0.5B")."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").rsplit("/", 1)[-1]).strip("-.")
    return name or "jobtrail"


def trackio_metrics(logs: dict[str, Any]) -> dict[str, float]:
    """A Trainer log as trackio series: train/<name> and eval/<name> (the names TRL users know).

    The trainer's end-of-training summary (train_loss, train_runtime ...) is no step: it gives nothing.
    """
    if "train_loss" in logs:
        return {}
    metrics = {}
    for name, value in logs.items():
        if name in SUMMARY_KEYS or not isinstance(value, int | float) or isinstance(value, bool):
            continue
        split, _, rest = name.partition("_")
        metrics[f"{split}/{rest}" if split in ("train", "eval") and rest else f"train/{name}"] = value
    return metrics


class TrackioReporter:
    """One attempt's trackio run, guarded. Its public methods are called from the main thread (the Trainer's
    hooks); the sender thread (trackio.init, then trackio.log) and trackio's own threads only take logs from
    `pending` and add to `failures`, under the lock."""

    def __init__(self, target: dict[str, Any], run_config: dict[str, Any], fix: str) -> None:
        self.target, self.fix = target, fix
        self.run: Any = None
        self.off = False  # trackio failed: nothing more is sent to it
        self.alerts = 0
        self.last_step: int | None = None  # the last step handed to trackio
        self.pending: deque[tuple[dict[str, float], int]] = deque(maxlen=MAX_PENDING_LOGS)
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.init_done = threading.Event()
        self.wake = threading.Event()  # send what is pending now, not at the next SEND_EVERY_S
        self.closing = False  # the run is finishing: the sender sends what is left and ends
        self.sender: threading.Thread | None = None
        self.started = time.monotonic()
        self.trackio: Any = None
        self.run_config = run_config
        try:
            import trackio
        except Exception as exc:  # noqa: BLE001 - a missing or broken trackio is an alert, never the job's end
            self.off = True
            self.failures.append(f"trackio could not be imported: {_describe(exc)}")
            # TRL imports trackio whenever it finds it installed (its model card at every checkpoint save,
            # with report_to "none" too): None in sys.modules makes it absent to everyone (find_spec → None).
            sys.modules["trackio"] = None  # type: ignore[assignment]
            return
        self.trackio = trackio
        self.package_dir = str(Path(trackio.__file__).parent)
        self._hook_warnings()
        _whole_line_prints(trackio.__name__)

    def start(self) -> None:
        """trackio.init, then the sending, in the background: the training waits for neither."""
        if not self.off:
            self.sender = threading.Thread(target=self._init_and_send, name="jobtrail-trackio", daemon=True)
            self.sender.start()

    # --- called from the Trainer's hooks ----------------------------------------------------

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Queue a log for the sender (a deque's append is safe between threads)."""
        if not self.off and metrics:
            self.pending.append((metrics, step))

    def poll(self, step: int) -> None:
        """Give up an init that failed or takes too long, and turn failures into alerts."""
        if not self.off and self.run is None and self.init_done.is_set():
            self._fail("trackio.init did not return a run")
        elif not self.off and self.run is None and time.monotonic() - self.started > INIT_TIMEOUT_S:
            self._fail(f"trackio.init did not finish within {INIT_TIMEOUT_S:.0f} s")
        if self.off:
            self.pending.clear()
        self._alert_failures(step)

    def alert(self, found: dict[str, Any]) -> None:
        """One of the job's alerts (code, step, message, fix) on the trackio run too, once the run exists."""
        if self.off or self.run is None:
            return
        try:
            self.run.alert(title=str(found.get("code")), text=f"{found.get('message')} Fix: {found.get('fix')}")
        except Exception as exc:  # noqa: BLE001 - trackio catches its own; anything left is an alert of ours
            self._record(f"trackio could not show the alert {found.get('code')}: {_describe(exc)}")

    def finish(self, step: int) -> None:
        """Wait for init (what is left of its time), have the sender send what is pending, finish the run:
        bounded."""
        if not self.off:
            self.init_done.wait(max(0.0, INIT_TIMEOUT_S - (time.monotonic() - self.started)))
        self.poll(step)
        self.closing = True
        self.wake.set()
        # (A sender still inside trackio.init was given up above, and is left to it.)
        if self.sender is not None and self.init_done.is_set() and not _joined(self.sender, FINISH_TIMEOUT_S):
            self._fail(f"trackio.log did not take the last logs within {FINISH_TIMEOUT_S:.0f} s")
        if self.run is not None and not self.off:
            done = _in_thread(self.run.finish, FINISH_TIMEOUT_S, self._record)
            if not done:
                self._record(f"trackio.finish did not finish within {FINISH_TIMEOUT_S:.0f} s")
            elif not self.target["space_id"]:
                self._check_stored()
        self.off = True
        self._alert_failures(step)

    # --- internals --------------------------------------------------------------------------

    def _init_and_send(self) -> None:
        self._init()
        while self.run is not None and not self.off:
            self.wake.wait(SEND_EVERY_S)
            self.wake.clear()
            closing = self.closing  # read first: every log came before it was set, so this round sends the last
            while self.pending and not self.off:
                self._send(*self.pending.popleft())
            if closing:
                return

    def _init(self) -> None:
        target = self.target
        try:
            run = self.trackio.init(
                project=target["project"],
                name=target["run"],
                group=target["group"],
                space_id=target["space_id"],
                bucket_id=target["bucket_id"],
                private=True if target["space_id"] else None,  # a Space trackio creates is the user's alone
                config=self.run_config,
                resume="allow",  # a restarted attempt (same name) continues its own run
                embed=False,
            )
        except BaseException as exc:  # noqa: BLE001 - any failure in trackio's thread is an alert, never a crash
            self._record(f"trackio.init failed: {_describe(exc)}")
            self.off = True
        else:
            self.run = run
        finally:
            self.init_done.set()

    def _send(self, metrics: dict[str, float], step: int) -> None:
        try:
            self.run.log(metrics, step=step)
        except Exception as exc:  # noqa: BLE001 - trackio catches its own; anything left is an alert
            self._fail(f"trackio could not log step {step}: {_describe(exc)}")
        else:
            self.last_step = step

    def _check_stored(self) -> None:
        """After finish: the local database holds the run up to the last step it was given."""
        if self.last_step is None:
            return
        try:
            from trackio.sqlite_storage import SQLiteStorage

            read_back = SQLiteStorage.get_max_step_for_run
        except (ImportError, AttributeError):  # another trackio layout: nothing to check with
            return
        try:
            stored = read_back(self.target["project"], run=self.run.name)
        except Exception as exc:  # noqa: BLE001 - an unreadable database is trackio's failure, not the job's
            self._record(f"trackio's local data could not be read back: {_describe(exc)}")
            return
        if stored is None or stored < self.last_step:
            held = "no step" if stored is None else f"steps up to {stored} only"
            self._record(
                f"trackio's data in {_trackio_dir(self.trackio)} holds {held} of run {self.run.name!r}, "
                f"which was given step {self.last_step}"
            )

    def announce(self) -> None:
        """The `trackio` event: where this attempt's run goes, so the receipt links it (whether trackio then
        works or not: its failures are alerts)."""
        target, space_id = self.target, self.target["space_id"]
        emit(
            "trackio",
            project=target["project"],
            run=target["run"],
            group=target["group"],
            dir=None if space_id else str(_trackio_dir(self.trackio)),
            space_id=space_id,
            url=SPACE_URL.format(space_id=space_id) if space_id else None,
            version=getattr(self.trackio, "__version__", None),  # None: it could not be imported
        )

    def _fail(self, message: str) -> None:
        self.off = True
        self._record(message)

    def _record(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)

    def _alert_failures(self, step: int) -> None:
        with self.lock:
            failures, self.failures = self.failures, []
        for message in dict.fromkeys(failures):  # each distinct failure once, in order
            if self.alerts >= MAX_ALERTS:
                return
            self.alerts += 1
            emit("alert", code="trackio.failed", step=step, message=_cut(message), fix=self.fix)

    def _hook_warnings(self) -> None:
        """Collect the warnings trackio's own modules raise (its failures), and show them as before."""
        shown = warnings.showwarning
        package_dir = self.package_dir

        def showwarning(message: Any, category: Any, filename: str, *args: Any, **kwargs: Any) -> None:
            if str(filename).startswith(package_dir):
                self._record(f"trackio: {message}")
            shown(message, category, filename, *args, **kwargs)

        warnings.showwarning = showwarning


def make_trackio_callback(config: dict[str, Any], run_id: str, attempt_id: str, model: str, method: str) -> Any:
    """The TrainerCallback that reports the training to trackio, or None when report_to leaves it out."""
    training_args = config.get("training_args") or {}
    wanted, _ = split_report_to(training_args.get("report_to"))
    if not wanted:
        return None
    from transformers import TrainerCallback

    target = trackio_target(config, run_id, attempt_id, model)
    run_config = {
        "job_id": run_id,
        "attempt_id": attempt_id,
        "method": method,
        "model": model,
        "dataset": (config.get("dataset") or {}).get("source"),
        "peft": config.get("peft"),
        **training_args,
    }
    where = f"the Space {target['space_id']}" if target["space_id"] else "TRACKIO_DIR"
    fix = (
        f"Training is not affected: step events keep every metric (metrics(job_id={run_id!r})). "
        f"For trackio, make {where} writable by the job"
        + (" (a write token, or a fine-grained one with repo.write on its namespace)" if target["space_id"] else "")
        + ", or pass hyperparameters={'report_to': 'none'} to turn trackio off."
    )
    reporter = TrackioReporter(target, run_config, fix)

    class TrackioCallback(TrainerCallback):
        """Mirrors the Trainer's logs to trackio; every hook is cheap and none raises."""

        target: dict[str, Any]  # where it reports, for the model card
        reporter: TrackioReporter  # its trackio run, for bench/step_overhead.py to wait on

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
        ) -> None:
            if logs and state.is_world_process_zero:
                reporter.log(trackio_metrics(logs), state.global_step)
                reporter.poll(state.global_step)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                reporter.finish(state.global_step)

        @staticmethod
        def also_on_trackio(emit_alerts: Callable[..., None]) -> Callable[..., None]:
            """`emit_alerts` (the job's alert events), each alert then shown on the trackio run as well."""

            def both(*alerts: dict[str, Any]) -> None:
                emit_alerts(*alerts)
                for found in alerts:
                    reporter.alert(found)

            return both

    callback = TrackioCallback()
    callback.target = target
    callback.reporter = reporter
    reporter.announce()  # before trackio's own thread starts printing
    reporter.start()
    if reporter.off:  # trackio could not even be imported: say so before training starts
        reporter.poll(0)
    return callback


def _whole_line_prints(package: str) -> None:
    """Give trackio's modules a print() that writes each line whole.

    trackio prints from its own threads (init, finish) while the job prints its events, and print()
    writes the text and the line end separately: a line of trackio's could land in front of an event's,
    which then no longer starts its line. One write per line keeps them apart.
    """

    def whole_line_print(
        *values: Any, sep: str | None = " ", end: str | None = "\n", file: Any = None, flush: bool = False
    ) -> None:
        stream = file if file is not None else sys.stdout
        stream.write((" " if sep is None else sep).join(map(str, values)) + ("\n" if end is None else end))
        if flush:
            stream.flush()

    for name, module in list(sys.modules.items()):
        if module is not None and (name == package or name.startswith(package + ".")):
            module.print = whole_line_print  # type: ignore[attr-defined]  # found before the builtin


def _in_thread(work: Any, timeout_s: float, on_error: Any) -> bool:
    """Run `work()` in a daemon thread; False when it did not return within timeout_s."""

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported through on_error, never raised
            on_error(f"{getattr(work, '__name__', 'trackio')} failed: {_describe(exc)}")

    thread = threading.Thread(target=target, name="jobtrail-trackio", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return not thread.is_alive()


def _joined(thread: threading.Thread, timeout_s: float) -> bool:
    thread.join(timeout_s)
    return not thread.is_alive()


def _trackio_dir(trackio: Any) -> Path:
    """Where trackio keeps local runs: its TRACKIO_DIR (read when it was imported), else where it would."""
    default = Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser() / "trackio"
    return Path(getattr(trackio, "TRACKIO_DIR", None) or os.environ.get("TRACKIO_DIR") or default).resolve()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")


def _cut(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
