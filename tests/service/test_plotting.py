"""Which panels a plot draws, and the PNG it writes (matplotlib, Agg)."""

from __future__ import annotations

import struct

from jobtrail.service.plotting import file_stem, panels, render

SFT = {name: [(1, 1.0), (2, 0.5)] for name in ("loss", "eval_loss", "grad_norm", "learning_rate", "tokens_per_second")}
GRPO = {
    name: [(1, 0.1), (2, 0.2)]
    for name in ("loss", "reward", "reward_std", "rewards/exact_match/mean", "rewards/exact_match/std", "grad_norm")
}


def test_default_panels_are_the_ones_people_watch_that_the_run_has():
    assert panels(SFT, None, "sft") == [
        ("loss", "eval_loss"),
        ("grad_norm",),
        ("learning_rate",),
        ("tokens_per_second",),
    ]
    assert panels(GRPO, None, "grpo") == [
        ("loss",),
        ("reward", "rewards/exact_match/mean"),
        ("reward_std",),
        ("grad_norm",),
    ]


def test_asked_panels_keep_their_order_and_their_companions():
    assert panels(SFT, ["grad_norm", "loss", "grad_norm"], "sft") == [("grad_norm",), ("loss", "eval_loss")]
    assert file_stem([("grad_norm",), ("loss", "eval_loss")]) == "grad_norm-loss"
    assert file_stem([("rewards/exact_match/mean",)]) == "rewards_exact_match_mean"


def test_render_writes_a_png_with_a_resumed_attempt_marked(tmp_path):
    series = {**SFT, "loss": [(s, 3.0 - 0.01 * s) for s in range(1, 41)], "grad_norm": [(1, None), (2, 0.5)]}
    path = render(
        series, panels(series, None, "sft"), [(21, "attempt 2 (from checkpoint-20)")], "jt-x", tmp_path / "p.png"
    )
    png = path.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1000, 600)  # two columns of 5 in, two rows of 3 in, at 100 dpi
