"""A metric (the loss, the gradient norm) logged NaN or infinite, in any logger's format. Pure.

Trainers and scripts log their metrics in many spellings (`{'loss': nan}`, `loss=nan`, `grad norm: nan |`, a printed
`tensor(nan, grad_fn=...)`); `families` reads a NaN at the newest logged step as a divergence, and `classify` passes
over it when a later line logs the same metric finite again (a step skipped or recovered from).
"""

from __future__ import annotations

import re

# A gradient norm NaN at the newest logged step, in any logger's spelling (`grad_norm: nan`, `grad norm: nan |`,
# `'grad_norm': nan`, `gradient_norm=nan`). Not inf: fp16's grad scaler logs an inf norm for each step it skips and
# recovers from. `families` keeps it with the NaN loss, whose signature it joins.
NAN_GRAD_NORM = r"(?i:(?:^|[{,\s|/])['\"]?grad(?:ient)?[ _]?norm['\"]?\s*[:=]?\s*['\"]?(?:tensor\()?nan\b)"
# A loss printed as a tensor (`print(loss)`), NaN: its grad_fn names it a loss.
NAN_LOSS_TENSOR = r"\btensor\((?:nan|inf)\b.*grad_fn=<\w*Loss\w*Backward"
# A loss's name as loggers write it: `loss`, `train/loss`, `eval_loss`, and the parts a detection or multi-task trainer
# logs (`loss_cls`, `lm_loss`), but not fp16's `loss_scale`, which is no loss.
LOSS_NAME = r"(?:[a-z0-9]+[_/])*loss(?:_(?!scale\b)[a-z0-9]+)*"
# A loss logged NaN/inf: `'loss': nan`, `loss=nan`, `train_loss = inf`, litgpt's `loss nan,`, `Loss: tensor(nan, ...)`.
NAN_LOSS = rf"(?i:(?:^|[{{,\s|])['\"]?{LOSS_NAME}['\"]?\s*[:=]?\s*['\"]?(?:tensor\()?-?(?:nan|inf|infinity)\b)"
# A metric's logged value, NaN or not: a later finite value of the same metric is training that recovered.
METRIC_VALUE = re.compile(
    rf"(?i)(?:^|[{{,\s|'\"(/])(?P<name>{LOSS_NAME}|grad(?:ient)?[ _]?norm)['\"]?\s*[:=]?\s*['\"]?(?:tensor\()?"
    r"(?P<value>-?(?:nan|inf(?:inity)?)\b|-?\d+(?:\.\d*)?(?:e[+-]?\d+)?)"
)


def finite_metrics(lines: list[str]) -> set[str]:
    """The metrics ('loss', 'gradnorm') the lines log a finite value of."""
    found = set()
    for line in lines:
        for match in METRIC_VALUE.finditer(line):
            if not re.fullmatch(r"-?(?:nan|inf(?:inity)?)", match["value"], re.IGNORECASE):
                found.add(_metric(match["name"]))
    return found


def nan_metrics(line: str) -> set[str]:
    """The metrics the line logs as NaN or inf."""
    return {
        _metric(m["name"])
        for m in METRIC_VALUE.finditer(line)
        if re.fullmatch(r"-?(?:nan|inf(?:inity)?)", m["value"], re.IGNORECASE)
    }


def _metric(name: str) -> str:
    """One key per metric: the gradient norm in any spelling, a loss by its name (the training loss with or without
    its `train` prefix)."""
    lowered = name.lower()
    return "gradnorm" if lowered.startswith("grad") else re.sub(r"^train[_/]", "", lowered)
