"""Estimates use what was measured (issue 25 item 8): a local model's rows are counted with its own
tokenizer, the speed says where it came from, a measurement at another micro-batch is rescaled by the
FLOPs model, and the timeout of a large dataset follows its tokens and the calibrated speed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from jobtrail.estimate.calibration import lookup, record_measurement
from jobtrail.estimate.inputs import load_model_config
from jobtrail.estimate.params import model_shape
from jobtrail.estimate.verdict import GUESSED
from jobtrail.ledger.store import Ledger
from jobtrail.preflight.data_size import data_stats, measured_data
from jobtrail.preflight.dataset import validate_dataset
from jobtrail.preflight.plan import estimate_alone
from jobtrail.requests import EstimateRequest

RATE = 200.0  # tokens/s: what the demo model's LoRA SFT reaches on a small CPU


def _measure(ledger: Ledger, model: Path, *, batch: int, max_length: int, attempt: str, rate: float = RATE) -> None:
    shape = model_shape(load_model_config(str(model)))
    record_measurement(
        ledger,
        architecture=shape.architecture,
        params=shape.params,
        method="sft",
        peft="lora",
        flavor="local",
        tokens_per_second=rate,
        peak_memory_bytes=None,
        max_length=max_length,
        batch=batch,
        attempt_id=attempt,
    )


def test_a_local_models_rows_are_counted_with_its_tokenizer_and_the_estimate_says_so(
    tiny_model: Path, chat_dataset: Path
) -> None:
    report = validate_dataset(str(chat_dataset), "sft", model=str(tiny_model))
    assert report.token_lengths is not None and len(report.token_lengths.lengths) == 64
    assert "lengths" not in report.model_dump()["token_lengths"]  # kept in the process, out of the result
    data = measured_data(str(chat_dataset), "sft", str(tiny_model))
    assert data is not None and data.counted == "tokenizer" and data.token_lengths == report.token_lengths.lengths
    result = estimate_alone(EstimateRequest(str(tiny_model), max_length=1024, per_device_train_batch_size=4), data=data)
    assert result.tokens == sum(report.token_lengths.lengths) and result.tokens_counted == "tokenizer"
    assert "counted with" in result.assumptions["data"] and "chat-templated" in result.assumptions["data"]
    assert "counted with the model's tokenizer" in result.to_markdown()
    # characters/4 (what the estimate used before) is far below what the chat template makes of these rows
    guessed = estimate_alone(
        EstimateRequest(str(tiny_model), dataset=str(chat_dataset), max_length=1024, per_device_train_batch_size=4)
    )
    assert guessed.tokens_counted == "characters" and guessed.tokens is not None and guessed.tokens < result.tokens / 2


def test_without_a_tokenizer_the_estimate_counts_characters_and_says_why(tmp_path: Path, chat_dataset: Path) -> None:
    report = validate_dataset(str(chat_dataset), "sft", model=str(tmp_path / "missing"))
    data = data_stats(report)
    assert data is not None and data.counted == "characters" and data.rows == 64
    assert "does not exist" in data.source


def test_the_speed_says_where_it_came_from_and_another_batch_is_rescaled(tmp_path: Path, tiny_model: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ask = dict(num_examples=64, avg_tokens=40, max_length=128)
    guess = estimate_alone(EstimateRequest(str(tiny_model), per_device_train_batch_size=4, **ask), calibration=ledger)
    assert not guess.calibrated and guess.speed_source == GUESSED and GUESSED in guess.to_markdown()

    _measure(ledger, tiny_model, batch=4, max_length=128, attempt="jt-a/1")
    same = estimate_alone(EstimateRequest(str(tiny_model), per_device_train_batch_size=4, **ask), calibration=ledger)
    # Recorded without step events (no attempt ran): its whole-run figure, and the estimate says so.
    assert same.speed_source == (
        "calibrated from 1 run on this machine (whole train_runtime: too few steps logged for a steady state)"
    )
    assert same.tokens_per_second == pytest.approx(RATE) and same.speed_source in same.to_markdown()

    # A measurement at another micro-batch is carried over by the model's ratio: the demo model's step is
    # mostly per-micro-batch overhead, so twice the batch runs nearly twice the tokens/s.
    bigger = estimate_alone(EstimateRequest(str(tiny_model), per_device_train_batch_size=8, **ask), calibration=ledger)
    assert bigger.calibrated and "rescaled from batch 4 × max_length 128" in bigger.speed_source
    assert RATE * 1.3 < (bigger.tokens_per_second or 0) < RATE * 2.5
    # Once that shape is measured too, its own measurement wins.
    _measure(ledger, tiny_model, batch=8, max_length=128, attempt="jt-b/1", rate=300.0)
    m = lookup(ledger, architecture="qwen2", params=same.params, method="sft", peft="lora", flavor="local", batch=8)
    assert m is not None and m.samples == 2 and m.tokens_per_second == 250.0  # no max_length: every shape counts
    again = estimate_alone(EstimateRequest(str(tiny_model), per_device_train_batch_size=8, **ask), calibration=ledger)
    assert again.tokens_per_second == pytest.approx(300.0) and "rescaled" not in again.speed_source


def _big_chat_file(path: Path, megabytes: int) -> Path:
    """Toy chat rows up to `megabytes` on disk (never trained on: only read and counted)."""
    rng = random.Random(0)
    words = ["apple", "sky", "grass", "red", "blue", "green", "one", "two", "three", "comes", "after", "the", "is"]
    with path.open("w", encoding="utf-8") as f:
        while f.tell() < megabytes * 1_000_000:
            question = " ".join(rng.choice(words) for _ in range(12))
            answer = " ".join(rng.choice(words) for _ in range(20))
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            f.write(json.dumps({"messages": messages}) + "\n")
    return path


def test_a_50mb_local_dataset_gets_a_timeout_that_follows_its_tokens_and_the_measured_speed(
    tmp_path: Path, tiny_model: Path
) -> None:
    dataset = _big_chat_file(tmp_path / "big.jsonl", 50)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    _measure(ledger, tiny_model, batch=4, max_length=128, attempt="jt-a/1")
    data = measured_data(str(dataset), "sft", str(tiny_model))
    assert data is not None and data.counted == "tokenizer" and data.rows > 200_000
    assert len(data.token_lengths) == 10_000 and "the first 10,000 measured" in data.source
    result = estimate_alone(
        EstimateRequest(str(tiny_model), max_length=128, per_device_train_batch_size=4), data=data, calibration=ledger
    )
    assert result.tokens is not None and result.hours is not None and result.recommended_timeout_s is not None
    train_hours = result.tokens / RATE / 3600
    assert result.hours == pytest.approx(train_hours, rel=0.01)  # start-up is seconds next to this
    assert result.hours > 10 and result.recommended_timeout != "1h"
    assert result.recommended_timeout_s >= result.hours * 3600 * 1.3
    assert result.recommended_timeout == f"{result.recommended_timeout_s // 3600}h"
