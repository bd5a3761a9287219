"""Run a training script with the bench's step clock: `python bench/step_hook.py SCRIPT [ARGS...]`.

bench/train_throughput.py runs both sides through this, so that each is timed by the same code at the same
point of the training loop, and the rendered job still runs byte for byte as `submit` would run it: the script
is executed as __main__ (runpy), unchanged. What this adds is one TrainerCallback, put into every
transformers Trainer the script makes (Trainer.__init__ is wrapped once transformers.trainer is imported, so
nothing is imported earlier than the script imports it). The callback sits right after transformers'
DefaultFlowCallback, before the script's own callbacks, so a stop or a save it asks for is seen by them as the
Trainer's own (the rendered job's checkpoint events follow it).

Its settings come as JSON in JOBTRAIL_BENCH_HOOK:
  out        the file it writes when training ends (below)
  stop_at    end training after this step (with a checkpoint, as a run reaching max_steps saves one)
  deadline   an epoch time: end training (with that checkpoint) at the first step after min_steps whose
             successor would end past it, judged from the median of the last steps' times
  min_steps  the fewest steps a deadline leaves (default 1)
  profile    [first, last]: a torch profiler over these steps; its summary (profile_summary.py) is written
What it writes: train_begin (epoch s), per step its begin and end (on_step_begin, on_step_end) and its log
(on_log: the time, after the Trainer's loss sync, and TRL's loss and num_tokens), every save (the step, the
time its write began — after that step's log — and ended, on_save, and the checkpoint's bytes), where and why
training was stopped, and the profile summary. All times are time.time(), the clock of JOBTRAIL events.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import itertools
import json
import os
import runpy
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import profile_summary

ENV = "JOBTRAIL_BENCH_HOOK"
RECENT_STEPS = 5  # the deadline's step time: the median of this many latest steps


class StepClock:
    """The callback's state and decisions, apart from transformers (the callback class is made on import)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.record: dict[str, Any] = {"steps": {}, "saves": [], "stopped": None, "profile": None}
        self.profiler: Any = None
        self.annotation: Any = None
        self.pending_save: dict[str, Any] | None = None

    def step(self, number: int) -> dict[str, Any]:
        return self.record["steps"].setdefault(str(number), {})

    def should_stop(self, number: int, now: float) -> str | None:
        """Why training ends after step `number`, or None."""
        stop_at, deadline = self.settings.get("stop_at"), self.settings.get("deadline")
        if stop_at is not None and number >= stop_at:
            return f"stop_at {stop_at}"
        if deadline is None or number < self.settings.get("min_steps", 1):
            return None
        ends = [self.step(n).get("end") for n in range(max(1, number - RECENT_STEPS), number + 1)]
        times = [b - a for a, b in itertools.pairwise(ends) if a is not None and b is not None]
        next_step = statistics.median(times) if times else 0.0
        return "deadline" if now + next_step > deadline else None

    def profiling(self, number: int) -> bool:
        window = self.settings.get("profile")
        return bool(window) and window[0] <= number <= window[1]

    def write(self) -> None:
        Path(self.settings["out"]).write_text(json.dumps(self.record))


def make_callback(clock: StepClock) -> Any:
    import torch
    from transformers import TrainerCallback

    class StepClockCallback(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.record["train_begin"] = time.time()
            clock.record["max_steps"] = state.max_steps

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            number = state.global_step + 1
            if clock.profiling(number):
                if clock.profiler is None:
                    clock.profiler = profile_summary.start()
                clock.annotation = torch.profiler.record_function(f"{profile_summary.STEP_MARK}{number}")
                clock.annotation.__enter__()
            clock.step(number)["begin"] = time.time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            number = state.global_step
            clock.step(number)["end"] = time.time()
            if clock.annotation is not None:
                clock.annotation.__exit__(None, None, None)
                clock.annotation = None
                if number >= clock.settings["profile"][1]:
                    self.finish_profile()
            why = clock.should_stop(number, time.time())
            if why and not control.should_training_stop:
                control.should_training_stop = True
                clock.record["stopped"] = {"step": number, "why": why}
            if control.should_training_stop and args.save_strategy == "steps":
                control.should_save = True  # the checkpoint a run that reaches max_steps writes
            if control.should_save:
                clock.pending_save = {"step": number, "begin": time.time()}

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if not logs or "loss" not in logs:
                return
            now = time.time()
            clock.step(state.global_step).update(logged=now, loss=logs["loss"], num_tokens=logs.get("num_tokens"))
            if clock.pending_save is not None and clock.pending_save["step"] == state.global_step:
                clock.pending_save["begin"] = now  # the Trainer writes after the step's log

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ended = time.time()
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else None
            begun = (clock.pending_save or {}).get("begin", ended)
            clock.record["saves"].append({"step": state.global_step, "begin": begun, "end": ended, "bytes": size})
            clock.pending_save = None

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.record["train_end"] = time.time()
            if clock.profiler is not None:  # training ended inside the window
                self.finish_profile()
            clock.write()

        def finish_profile(self) -> None:
            try:
                clock.record["profile"] = profile_summary.finish(clock.profiler)
            except Exception as exc:  # noqa: BLE001 - a profile that cannot be read must not end the training
                clock.record["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
            clock.profiler = None

    return StepClockCallback()


def install(clock: StepClock) -> None:
    """Wrap Trainer.__init__ as soon as transformers.trainer is imported (by the script, when it does)."""

    def patch(module: ModuleType) -> None:
        trainer_class = module.Trainer
        original = trainer_class.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            callbacks = self.callback_handler.callbacks
            flow = next((i for i, c in enumerate(callbacks) if type(c).__name__ == "DefaultFlowCallback"), -1)
            callbacks.insert(flow + 1, make_callback(clock))

        trainer_class.__init__ = __init__

    if "transformers.trainer" in sys.modules:
        patch(sys.modules["transformers.trainer"])
        return
    sys.meta_path.insert(0, _AfterImport("transformers.trainer", patch))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` once the module `name` has been executed (a find_spec that only looks, as
    importlib.util.find_spec does, loads nothing: the finder stays until the module is really loaded)."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, finder = spec.loader, self

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                if finder in sys.meta_path:
                    sys.meta_path.remove(finder)
                    finder.then(module)

        spec.loader = Loader()
        return spec


def main() -> None:
    script, *args = sys.argv[1:]
    install(StepClock(json.loads(os.environ[ENV])))
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).resolve().parent)  # as `python SCRIPT` would have it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
