"""jobtrail job-side watching: the job watches itself and says what it sees as `alert` events.

Pure detectors over the numbers a run logs, fed by the training callback (_training.py), which
prints each alert as an `alert` event {code, step, message, fix} the moment it is seen: one per
code per attempt, so a run that stays bad says it once. A run is judged from its second logged
step on, against its first (a destroyed model does not wait for a warm-up): the alerts that say the
weights are gone (STOPPING: a NaN loss or weights, a loss blown far above its first value or above
a uniform guess, a collapse of a run that had been learning) stop training there, and the job ends `diverged`
(_runtime.FAILURE_RULES) keeping only checkpoints a healthy loss vouched for. A run whose gradient was
exactly 0 from its first logged step on never had anything to train: it stops too, with a blocking
`nothing_learned` alert, and ends `config_error`. The Watchdog thread raises `stalled` when no step comes
for a long time.

render.py inlines this file into the training scripts (like _runtime.py, standard library only and
without `from __future__` imports); the tests load it as it is.
"""

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any

WARMUP_LOGS = 5  # logged steps before a spike or an explosion is judged against the running median
RUNNING_WINDOW = 20  # the running median looks at this many of the latest logged values
LOSS_SPIKE_FACTOR = 3.0
GRAD_NORM_FACTOR = 100.0
OVERFIT_RISES = 3  # eval loss rising this many evaluations in a row, while the train loss falls
STALL_MINUTES = 10.0  # without a step or an evaluation batch, the job says it may be stuck
SHARE_MIN_LOGS = 3  # logged steps before "most steps show it" (GRPO's check_steps) is asked
# From the second logged step on: a loss this many times the first one has left the run, whatever the model.
DIVERGE_FACTOR = 10.0
# A token loss above this many times ln(vocabulary) (the loss of guessing every token uniformly) is a model
# that predicts worse than knowing nothing: judged from the first logged step.
UNIFORM_MARGIN = 1.5
FIRST_GRAD_FACTOR = 100.0  # before the running median exists, a gradient norm this far above the first
COLLAPSE_LOGS = 2  # consecutive logged steps of a gradient norm of exactly 0, or a loss pinned at ln(vocabulary)
PINNED = 0.005  # within this share of ln(vocabulary), a loss reads as pinned there
# The alerts that stop the run (its weights are gone): the job ends `diverged`.
STOPPING = ("nan_loss", "nan_weights", "loss_diverged", "collapsed")
# Logged steps that must all show no change before a run that ended on its own is sure to have learned nothing.
STILL_LOGS = 3
# Logged steps before a loss that did not fall at all is worth a word (a judgment: a warning, not blocking).
FLAT_LOGS = 10
# DPO's (and KTO's) step metric: 0 while the policy still equals its reference model.
MARGINS = "rewards/margins"


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or infinite: training stopped, and the job ends `diverged`."""


class NothingTrainableError(RuntimeError):
    """The gradient was exactly 0 from the first logged step on: the setup trains nothing, whatever the learning
    rate. Training stopped, and the job ends `config_error` (its nothing_learned alert names the cause)."""


def make_alert(code: str, step: int | None, message: str, fix: str) -> dict[str, Any]:
    return {"code": code, "step": step, "message": message, "fix": fix}


def is_finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def running_median(values: list[float]) -> float | None:
    recent = sorted(values[-RUNNING_WINDOW:])
    if not recent:
        return None
    middle = len(recent) // 2
    return recent[middle] if len(recent) % 2 else (recent[middle - 1] + recent[middle]) / 2


def lower_learning_rate_call(job_id: str, learning_rate: float | None) -> str:
    """The retry that a diverging run needs: a learning rate ten times lower (1e-4, a common adapter
    rate, for one of 1 and up; the server's refusal names the method's default there)."""
    lower = f"{learning_rate / 10:.3g}" if learning_rate and learning_rate < 1 else "0.0001"
    return f'retry(job_id="{job_id}", changes={{"learning_rate": {lower}}})'


def nan_loss_alert(step: int, loss: Any, job_id: str, learning_rate: float | None) -> dict[str, Any] | None:
    """A loss that is NaN or infinite: the weights are lost from here on."""
    if is_finite(loss):
        return None
    return make_alert(
        "nan_loss",
        step,
        f"The loss became {loss} at step {step} (learning_rate {learning_rate:g}): the weights no longer hold "
        "numbers, so training stopped here and the job ends 'diverged'."
        if learning_rate
        else f"The loss became {loss} at step {step}: training stopped here and the job ends 'diverged'.",
        f"{lower_learning_rate_call(job_id, learning_rate)} resumes from the last committed checkpoint with a "
        "lower learning rate; clipping (max_grad_norm=1.0) and warmup (warmup_steps=0.1) help too.",
    )


def nan_weights_alert(step: int, job_id: str, learning_rate: float | None) -> dict[str, Any]:
    """Weights that hold NaN or infinite values when a checkpoint is due: it is not saved."""
    return make_alert(
        "nan_weights",
        step,
        f"The trainable weights hold NaN or infinite values at step {step}, where a checkpoint was due: it was not "
        "saved, training stopped here and the job ends 'diverged'.",
        f"{lower_learning_rate_call(job_id, learning_rate)} resumes from the last committed checkpoint with a "
        "lower learning rate; clipping (max_grad_norm=1.0) and warmup (warmup_steps=0.1) help too.",
    )


def weights_finite(model: Any) -> bool:
    """Whether every trainable weight is a finite number (True when there is no model to check)."""
    if model is None:
        return True
    import torch

    with torch.no_grad():
        flags = [torch.isfinite(p).all() for p in model.parameters() if p.requires_grad]
    # One read back from the device for all of them, not one per weight, where they are plain tensors on one
    # device (a sharded weight's flag is a DTensor, and a model split over GPUs has flags on each).
    if flags and all(type(flag) is torch.Tensor for flag in flags) and len({flag.device for flag in flags}) == 1:
        return bool(torch.stack(flags).all())
    return all(bool(flag) for flag in flags)


def loss_spike_alert(step: int, loss: Any, earlier: list[float]) -> dict[str, Any] | None:
    """A loss far above its running median, once the run has warmed up."""
    median = running_median(earlier)
    if len(earlier) < WARMUP_LOGS or median is None or median <= 0 or not is_finite(loss):
        return None
    if loss <= LOSS_SPIKE_FACTOR * median:
        return None
    return make_alert(
        "loss_spike",
        step,
        f"The loss jumped to {loss:.4g} at step {step}, {loss / median:.1f}x its running median ({median:.4g}).",
        "Watch the next steps (metrics): one spike that settles is harmless; a loss that stays up needs a lower "
        "learning_rate or max_grad_norm=1.0, and bad rows in the data can cause it (validate_dataset).",
    )


def grad_norm_alert(
    step: int, grad_norm: Any, earlier: list[float], *, overflow_expected: bool
) -> dict[str, Any] | None:
    """A gradient norm that is not finite, or far above its running median once the run has warmed up (far
    above the first logged one before that).

    overflow_expected: fp16 training, whose loss scaler skips a step with an infinite gradient and
    lowers its scale; an occasional infinite norm there is the scaler at work, not an explosion.
    """
    if grad_norm is None or (not is_finite(grad_norm) and overflow_expected):
        return None
    median = running_median(earlier)
    if is_finite(grad_norm):
        if len(earlier) >= WARMUP_LOGS and median:
            reference, what, factor = median, "its running median", GRAD_NORM_FACTOR
        elif earlier and earlier[0] > 0:  # from the second logged step on: against the first
            reference, what, factor = earlier[0], "the first logged one", FIRST_GRAD_FACTOR
        else:
            return None
        if grad_norm <= factor * reference:
            return None
        size = f"{grad_norm:.4g}, {grad_norm / reference:.0f}x {what} ({reference:.4g})"
    else:
        size = str(grad_norm)
    return make_alert(
        "grad_norm_exploding",
        step,
        f"The gradient norm reached {size} at step {step}: the updates are exploding.",
        "Lower learning_rate (retry with changes={'learning_rate': ...}), clip the gradients (max_grad_norm=1.0), "
        "or warm up longer (warmup_steps=0.1).",
    )


def stopped_fix(job_id: str, learning_rate: float | None) -> str:
    return (
        f"{lower_learning_rate_call(job_id, learning_rate)} resumes from the last committed checkpoint from before "
        "the blow-up (from the start if there is none) with a lower learning rate; clipping (max_grad_norm=1.0) and "
        "warmup (warmup_steps=0.1) help too."
    )


def loss_diverged_alert(
    step: int, loss: Any, first: float | None, uniform: float | None, job_id: str, learning_rate: float | None
) -> dict[str, Any] | None:
    """A finite loss that says the weights are destroyed: DIVERGE_FACTOR times the first logged loss, or above
    UNIFORM_MARGIN times `uniform` (ln(vocabulary): None where the loss is no token loss)."""
    if not is_finite(loss):
        return None
    if first is not None and first > 0 and loss > DIVERGE_FACTOR * first:
        why = f"{loss / first:.3g}x the first logged loss ({first:.4g})"
    elif uniform and loss > UNIFORM_MARGIN * uniform:
        why = f"above ln(vocabulary) = {uniform:.4g}, the loss of guessing every token uniformly"
    else:
        return None
    at = f" (learning_rate {learning_rate:g})" if learning_rate else ""
    return make_alert(
        "loss_diverged",
        step,
        f"The loss blew up to {loss:.4g} at step {step}{at}, {why}: the weights are destroyed, so training stopped "
        "here and the job ends 'diverged'.",
        stopped_fix(job_id, learning_rate),
    )


def collapse_alert(
    step: int,
    losses: list[float],
    grad_norms: list[Any],
    uniform: float | None,
    job_id: str,
    learning_rate: float | None,
) -> dict[str, Any] | None:
    """A model that no longer learns anything: the gradient norm exactly 0 over COLLAPSE_LOGS logged steps (the
    weights stopped changing) after a non-zero one, or the loss pinned at ln(vocabulary) (uniform output) after it
    had been elsewhere. `losses` and `grad_norms` are every logged value so far, this step's last. A gradient of 0
    from the first logged step on is no collapse: nothing was ever trained (still_from_start_alert)."""
    recent, before = grad_norms[-COLLAPSE_LOGS:], grad_norms[:-COLLAPSE_LOGS]
    learning = any(is_finite(g) and g != 0 for g in before)
    if len(recent) == COLLAPSE_LOGS and all(g == 0 for g in recent) and learning:
        what = f"the gradient norm was exactly 0 at the last {COLLAPSE_LOGS} logged steps: the weights stopped changing"
    elif uniform and _pinned(losses, uniform):
        what = f"the loss is pinned at {losses[-1]:.4g} = ln(vocabulary): the model outputs the same uniform guess"
    else:
        return None
    return make_alert(
        "collapsed",
        step,
        f"The run collapsed at step {step}: {what}. Training stopped here and the job ends 'diverged'.",
        stopped_fix(job_id, learning_rate),
    )


def _pinned(losses: list[float], uniform: float) -> bool:
    recent, earlier = losses[-COLLAPSE_LOGS:], losses[:-COLLAPSE_LOGS]
    near = len(recent) == COLLAPSE_LOGS and all(abs(loss - uniform) <= PINNED * uniform for loss in recent)
    # A model trained from random weights starts at ln(vocabulary): pinned only after it had left it.
    return near and any(abs(loss - uniform) > 0.1 * uniform for loss in earlier)


def overfitting_alert(evals: list[tuple[int, float]], train: list[tuple[int, float]]) -> dict[str, Any] | None:
    """Eval loss rising OVERFIT_RISES evaluations in a row while the training loss falls."""
    if len(evals) <= OVERFIT_RISES:
        return None
    window = evals[-OVERFIT_RISES - 1 :]
    if not all(later[1] > earlier[1] for earlier, later in pairwise(window)):
        return None
    (first_step, first_eval), (last_step, last_eval) = window[0], window[-1]
    before = [loss for step, loss in train if step <= first_step][-3:]
    after = [loss for step, loss in train if first_step < step <= last_step][-3:]
    if not before or not after or sum(after) / len(after) >= sum(before) / len(before):
        return None
    return make_alert(
        "overfitting",
        last_step,
        f"eval_loss rose {OVERFIT_RISES} evaluations in a row ({first_eval:.4g} at step {first_step} → "
        f"{last_eval:.4g} at step {last_step}) while the training loss fell: the model is learning the training "
        "rows, not the task.",
        f"Keep the checkpoint nearest step {first_step} (evaluate takes it as checkpoint=), or train less "
        f"(max_steps={first_step}), on more data, with a lower learning_rate or more lora_dropout.",
    )


def resubmit_call(config: dict[str, Any]) -> str:
    """The submit that trains the job's model on its data again, at the method's default learning rate."""
    dataset = config.get("dataset") or {}
    fields = {"method": config.get("template"), "model": config.get("model"), "dataset": dataset.get("source")}
    if dataset.get("mapping"):
        fields["dataset_mapping"] = dataset["mapping"]
    return "submit(" + ", ".join(f"{name}={json.dumps(value)}" for name, value in fields.items()) + ")"


def nothing_learned_alert(
    step: int,
    losses: list[float],
    grad_norms: list[Any],
    margins: list[float],
    learning_rate: float | None,
    *,
    token_loss: bool,
    start_step: int,
    config: dict[str, Any],
) -> dict[str, Any] | None:
    """A run that ended on its own and surely changed nothing: a learning rate of 0, or (over STILL_LOGS logged
    steps or more) a gradient norm of exactly 0 at every one, a loss identical at every one (`token_loss`: a loss
    that is a scale, not GRPO's), or preference margins of exactly 0 at every one (the policy never left its
    reference). Blocking: the verdict reads "succeeded, but nothing_learned"."""
    resubmit = resubmit_call(config)
    since = f"the checkpoint it resumed from (step {start_step})" if start_step else "the model it started from"
    n = len(losses)
    if learning_rate == 0:
        why = "the learning rate was 0, so no update moved a weight"
        fix = (
            f"{resubmit} trains it again at the method's default learning rate (add the other hyperparameters you "
            "gave it, without learning_rate 0)."
        )
    else:
        if len(grad_norms) >= STILL_LOGS and all(g == 0 for g in grad_norms):
            why = f"the gradient norm was exactly 0 at every one of the {len(grad_norms)} logged steps"
        elif token_loss and n >= STILL_LOGS and len(set(losses)) == 1:
            why = f"the loss was {losses[0]:.6g} at every one of the {n} logged steps"
        elif len(margins) >= STILL_LOGS and all(m == 0 for m in margins):
            why = f"{MARGINS} was exactly 0 at every one of the {len(margins)} logged steps"
            why += ": the policy never left its reference model"
        else:
            return None
        data, method = json.dumps((config.get("dataset") or {}).get("source")), json.dumps(config.get("template"))
        fix = (
            f"Find what held the weights still: validate_dataset(dataset={data}, method={method}) "
            "checks the rows (a row whose trained part is empty or cut off by max_length teaches nothing), and the "
            f"learning rate ({learning_rate:g}) may be too small to move them; then {resubmit} with "
            'hyperparameters={"learning_rate": ...} trains it again.'
        )
    return make_alert(
        "nothing_learned", step, f"The run ended without learning anything: {why}. Its final model is {since}.", fix
    )


def still_from_start_alert(step: int, grad_norms: list[Any], config: dict[str, Any]) -> dict[str, Any] | None:
    """The gradient norm exactly 0 at each of the first STILL_LOGS logged steps (`grad_norms`: all of them): no
    update can move a weight, whatever the learning rate, so the rest of the budget would train nothing. Blocking
    (nothing_learned, as training would have ended), and it stops the run: the job ends `config_error`."""
    if len(grad_norms) < STILL_LOGS or any(g != 0 for g in grad_norms):
        return None
    resubmit = resubmit_call(config)
    dropout = (config.get("peft") or {}).get("dropout")
    if isinstance(dropout, int | float) and dropout >= 1:
        why = f"lora_dropout {dropout:g} zeroes every input of the LoRA adapters"
        fix = (
            f"{resubmit} trains it again with the default lora_dropout (add the other hyperparameters you gave it, "
            "without lora_dropout 1)."
        )
    else:
        data, method = json.dumps((config.get("dataset") or {}).get("source")), json.dumps(config.get("template"))
        why = "no trainable weight gets a gradient from the loss"
        fix = (
            "Find what holds every gradient at 0: no weight left trainable (a frozen model, adapters on modules the "
            "loss never reaches), or every label masked (-100): completion_only_loss or assistant_only_loss on rows "
            f"without completion or assistant tokens, or with them cut off by max_length. validate_dataset(dataset="
            f"{data}, method={method}) checks the rows; then {resubmit} with the setting fixed trains it again."
        )
    return make_alert(
        "nothing_learned",
        step,
        f"Nothing is being learned: the gradient norm was exactly 0 at every one of the first {len(grad_norms)} "
        f"logged steps, so no update moves a weight, whatever the learning rate ({why}). Training stopped here and "
        "the job ends 'config_error'.",
        fix,
    )


def loss_not_falling_alert(
    step: int, losses: list[float], job_id: str, learning_rate: float | None
) -> dict[str, Any] | None:
    """A judgment, not a certainty (a warning): over FLAT_LOGS logged steps or more, the loss's last third was no
    lower on average than its first third. A run trained from its start only (a resumed one may start at its floor)."""
    if len(losses) < FLAT_LOGS:
        return None
    third = len(losses) // 3
    first, last = sum(losses[:third]) / third, sum(losses[-third:]) / third
    if last < first:
        return None
    rate = f" (learning_rate {learning_rate:g})" if learning_rate else ""
    return make_alert(
        "loss_not_falling",
        step,
        f"The loss did not fall over {len(losses)} logged steps: {first:.4g} on average over the first {third}, "
        f"{last:.4g} over the last {third}. The run may have learned little{rate}.",
        f'evaluate(job_id="{job_id}", dataset=...) on held-out data compares the final model with the base model; '
        "if it did not improve, train again with a higher learning_rate or on more data.",
    )


class RunWatch:
    """The numbers an attempt has logged, and the alerts they raised (each code once)."""

    def __init__(
        self,
        job_id: str,
        learning_rate: float | None,
        *,
        spikes: bool,
        overflow_expected: bool,
        vocab_size: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.job_id, self.learning_rate = job_id, learning_rate
        self.config = config or {}  # the job's CONFIG: what a fix names (the data, the method, the adapters)
        # False where the loss is no scale to compare with (GRPO's hovers around 0): no spike, blow-up or collapse
        # is judged from it.
        self.spikes = spikes
        self.overflow_expected = overflow_expected
        # A token loss's ceiling, ln(vocabulary): None where the loss is no token cross-entropy (DPO's, a reward
        # model's) or the vocabulary is unknown.
        self.uniform: float | None = None
        self.know_vocabulary(vocab_size)
        self.losses: list[tuple[int, float]] = []
        self.loss_values: list[float] = []  # the same losses without their steps
        # The lowest and highest loss but the last COLLAPSE_LOGS: all a pinned loss is compared with (_pinned), kept
        # as the run goes so that no step walks every loss before it.
        self.earlier_range: list[float] = []
        self.grad_norms: list[float] = []
        self.logged_grads: list[Any] = []  # every logged grad norm, None where a step logged none
        # The first non-zero grad norm but the last COLLAPSE_LOGS (or none): all collapse_alert reads of them.
        self.earlier_grad: list[float] = []
        self.evals: list[tuple[int, float]] = []
        self.raised: set[str] = set()
        self.diverged: dict[str, Any] | None = None  # the STOPPING alert, once the weights are gone
        self.still: dict[str, Any] | None = None  # the nothing_learned alert of a run that never had a gradient
        self.healthy_step: int | None = None  # the last logged step whose loss said the run was fine

    @property
    def stopped(self) -> dict[str, Any] | None:
        """The alert that stops the run: its weights are gone (diverged), or nothing was ever trained (still)."""
        return self.diverged or self.still

    def on_step(self, step: int, loss: Any, grad_norm: Any) -> list[dict[str, Any]]:
        if self.stopped is not None:  # the run is stopping: what follows is the same story
            return []
        self.diverged = nan_loss_alert(step, loss, self.job_id, self.learning_rate)
        if self.diverged is not None:
            return self.new([self.diverged])
        first = self.loss_values[0] if self.loss_values else None
        exploding = grad_norm_alert(step, grad_norm, self.grad_norms, overflow_expected=self.overflow_expected)
        self.remember_loss(step, float(loss))
        self.remember_grad(grad_norm)
        if self.spikes:
            losses = [*self.earlier_range, *self.loss_values[-COLLAPSE_LOGS:]]  # what collapse_alert reads of them
            grads = [*self.earlier_grad, *self.logged_grads[-COLLAPSE_LOGS:]]
            self.diverged = loss_diverged_alert(
                step, loss, first, self.uniform, self.job_id, self.learning_rate
            ) or collapse_alert(step, losses, grads, self.uniform, self.job_id, self.learning_rate)
            if self.diverged is not None:
                return self.new([exploding, self.diverged])
            if len(self.logged_grads) == STILL_LOGS:  # from the first logged step on: judged once, there
                self.still = still_from_start_alert(step, self.logged_grads, self.config)
                if self.still is not None:
                    return self.new([self.still])
        # The earlier losses as far as loss_spike_alert reads them: the running median's window (it counts at least
        # WARMUP_LOGS only where the run has logged that many).
        earlier = self.loss_values[-RUNNING_WINDOW - 1 : -1]
        found = [loss_spike_alert(step, loss, earlier) if self.spikes else None, exploding]
        if is_finite(grad_norm):
            self.grad_norms.append(float(grad_norm))
        self.healthy_step = step
        return self.new(found)

    def remember_loss(self, step: int, loss: float) -> None:
        self.losses.append((step, loss))
        self.loss_values.append(loss)
        if len(self.loss_values) > COLLAPSE_LOGS:  # one more loss leaves the last COLLAPSE_LOGS
            leaving = self.loss_values[-COLLAPSE_LOGS - 1]
            low, high = self.earlier_range or (leaving, leaving)
            self.earlier_range = [min(low, leaving), max(high, leaving)]

    def remember_grad(self, grad_norm: Any) -> None:
        self.logged_grads.append(grad_norm)
        if not self.earlier_grad and len(self.logged_grads) > COLLAPSE_LOGS:
            leaving = self.logged_grads[-COLLAPSE_LOGS - 1]
            if is_finite(leaving) and leaving != 0:
                self.earlier_grad = [float(leaving)]

    def on_train_end(
        self, steps: list[dict[str, Any]], config: dict[str, Any], start_step: int
    ) -> list[dict[str, Any]]:
        """What the whole attempt says once it ended on its own: nothing learned (sure), or a loss that never fell
        (a judgment). `steps` are the method's metrics step by step; `start_step` the step it resumed at."""
        if self.stopped is not None or not self.losses:
            return []
        step, losses = self.losses[-1][0], [v for _, v in self.losses]
        margins = [s[MARGINS] for s in steps if is_finite(s.get(MARGINS))]
        found = nothing_learned_alert(
            step,
            losses,
            self.logged_grads,
            margins,
            self.learning_rate,
            token_loss=self.spikes,
            start_step=start_step,
            config=config,
        )
        if found is None and self.spikes and not start_step:
            found = loss_not_falling_alert(step, losses, self.job_id, self.learning_rate)
        return self.new([found])

    def know_vocabulary(self, vocab_size: int | None) -> None:
        """The model's vocabulary, once it is loaded: a token loss's ceiling is ln(vocabulary)."""
        self.uniform = math.log(vocab_size) if vocab_size and vocab_size > 1 else None

    def on_lost_weights(self, step: int) -> list[dict[str, Any]]:
        """A checkpoint is due and the weights are not numbers (a loss not logged at this step would be)."""
        if self.stopped is not None:
            return []
        self.diverged = nan_weights_alert(step, self.job_id, self.learning_rate)
        return self.new([self.diverged])

    def on_eval(self, step: int, eval_loss: Any) -> list[dict[str, Any]]:
        if not is_finite(eval_loss):
            return []
        self.evals.append((step, float(eval_loss)))
        return self.new([overfitting_alert(self.evals, self.losses)])

    def new(self, found: Iterable[dict[str, Any] | None]) -> list[dict[str, Any]]:
        """The alerts among `found` whose code was not raised before (and now is)."""
        fresh = []
        for alert in found:
            if alert is not None and alert["code"] not in self.raised:
                self.raised.add(alert["code"])
                fresh.append(alert)
        return fresh


class Watchdog:
    """A thread that raises a `stalled` alert when no step (nor evaluation batch) came for limit_s.

    beat() on every sign of progress; paused() around work that is slow by nature (committing and
    pushing a checkpoint). The check itself is pure (check(now)), the thread only calls it.
    """

    def __init__(self, limit_s: float | None, emit_alert: Callable[[dict[str, Any]], None]) -> None:
        self.limit_s, self.emit_alert = limit_s, emit_alert
        self.last_beat, self.step = time.monotonic(), 0
        self.pauses = 0
        self.fired = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self, step: int | None = None) -> None:
        self.last_beat = time.monotonic()
        self.step = step if step is not None else self.step

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pauses += 1
        try:
            yield
        finally:
            self.pauses -= 1
            self.beat()

    def check(self, now: float) -> dict[str, Any] | None:
        if self.fired or self.pauses or not self.limit_s or now - self.last_beat < self.limit_s:
            return None
        self.fired = True
        minutes = (now - self.last_beat) / 60
        return make_alert(
            "stalled",
            self.step,
            f"No training step for {minutes:.1f} minutes (the last was step {self.step}): the job may be stuck "
            "(a hung data loader or collective, a generation that never ends) or a step is far slower than before.",
            "Read its logs for what it is doing; a job that stays stuck costs its flavor's price until its "
            "timeout: cancel it, then a retry resumes from the last committed checkpoint.",
        )

    def start(self) -> None:
        if not self.limit_s or self._thread is not None:
            return
        self.beat()
        poll_s = min(30.0, self.limit_s / 4)

        def watch() -> None:
            while not self._stop.wait(poll_s):
                alert = self.check(time.monotonic())
                if alert:
                    self.emit_alert(alert)

        self._thread = threading.Thread(target=watch, name="jobtrail-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
