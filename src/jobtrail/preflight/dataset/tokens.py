"""Token lengths of the rows as a method's trainer would tokenize them, with the model's own
tokenizer (loaded by read.py). Pure given the tokenizer; nothing here imports transformers.
"""

from __future__ import annotations

import math
from typing import Any

from jobtrail.preflight.dataset.mapping import map_rows
from jobtrail.preflight.dataset.table import Table
from jobtrail.results.dataset import DatasetReport, TokenStats, count, finding


def add_token_stats(
    report: DatasetReport,
    table: Table,
    model: str,
    tokenizer: Any | None,
    *,
    unloaded: str | None,
    max_length: int | None,
    positions: int | None,
    method: str | None,
    mapping: dict[str, Any] | None,
) -> None:
    """Token-length percentiles of the rows as a fitting method's trainer would see them (mapped).

    The method asked about, else the first that fits; when none fits, the rows as they are.
    tokenizer: `model`'s, or None with `unloaded` saying why it could not be loaded.
    positions: the most tokens the model takes, when known: advice never goes past it.
    """
    candidates = [method] if method else list(report.methods)
    chosen = next((m for m in candidates if report.methods[m].status != "INCOMPATIBLE"), None)
    if tokenizer is None:
        report.findings.append(
            finding(
                "dataset.tokens",
                f"Token lengths were not measured: {unloaded}.",
                "To measure them, run validate_dataset with model= a local directory that holds the tokenizer files.",
                "warning",
            )
        )
        return
    source = map_rows(table.rows, table.numbers, mapping)
    view = map_rows(source.rows, source.numbers, report.methods[chosen].mapping if chosen else None)
    lengths, templated, untemplated = _token_lengths(tokenizer, view.rows, prompt_only=chosen == "grpo")
    if untemplated:
        report.findings.append(
            finding(
                "dataset.chat_template",
                f"The tokenizer of {model} has no chat template, so {count(untemplated, 'conversational row')} "
                "could not be formatted.",
                "Use a model whose tokenizer has a chat template (an instruct model), or set one before training.",
                "warning",
            )
        )
    if not lengths:
        report.findings.append(
            finding(
                "dataset.tokens",
                "Token lengths were not measured: no row holds text or messages to tokenize.",
                None,
                "info",
            )
        )
        return
    report.token_lengths = _stats(lengths, max_length, model, templated)
    if max_length is not None and report.token_lengths.over_max_length:
        stats = report.token_lengths
        report.findings.append(
            finding(
                "dataset.too_long",
                f"{stats.over_max_length} of {count(stats.rows, 'row')} are longer than max_length {max_length} tokens "
                f"(p99 {stats.p99}, max {stats.max}); they will be truncated.",
                _too_long_fix(stats.p99, max_length, positions),
                "warning",
            )
        )


def _too_long_fix(p99: int, max_length: int, positions: int | None) -> str:
    """Raise max_length only as far as the model's positions reach; past them, the rows must go."""
    if positions is None or p99 <= positions:
        return f"Raise max_length to about {p99}, or shorten those rows."
    if max_length < positions:
        return (
            f"Raise max_length to {positions} (the model's limit); rows longer than that will still be cut: "
            "filter or shorten them, or use a model with more positions."
        )
    return (
        f"max_length is at the model's limit ({positions} positions): filter or shorten the long rows, "
        "or use a model with more positions."
    )


def _token_lengths(tokenizer: Any, rows: list[dict[str, Any]], *, prompt_only: bool) -> tuple[list[int], bool, int]:
    """(length per row: its longest sequence, any chat-templated, conversational rows skipped).

    prompt_only: measure the prompt alone (GRPO generates the completion; its prompt is what fits).
    """
    has_template = bool(getattr(tokenizer, "chat_template", None))
    texts: list[tuple[int, str, bool]] = []  # (row index, text, chat-templated)
    untemplated = 0
    for index, row in enumerate(rows):
        for sequence, generation_prompt in _sequences({"prompt": row.get("prompt")} if prompt_only else row):
            if isinstance(sequence, str):
                texts.append((index, sequence, False))
            elif not has_template:
                untemplated += 1
                break
            else:
                try:
                    text = tokenizer.apply_chat_template(
                        sequence, tokenize=False, add_generation_prompt=generation_prompt
                    )
                except Exception:  # noqa: BLE001  a malformed row (already listed as a problem) or a template error
                    continue
                texts.append((index, text, True))
    longest: dict[int, int] = {}
    for templated in (False, True):
        batch = [(i, t) for i, t, is_templated in texts if is_templated == templated]
        if not batch:
            continue
        # Chat templates write their own special tokens; plain text gets the tokenizer's defaults.
        ids = tokenizer([t for _, t in batch], add_special_tokens=not templated)["input_ids"]
        for (i, _), row_ids in zip(batch, ids, strict=True):
            longest[i] = max(longest.get(i, 0), len(row_ids))
    return list(longest.values()), any(t for _, _, t in texts), untemplated


def _sequences(row: dict[str, Any]) -> list[tuple[Any, bool]]:
    """What a trainer tokenizes for a row: (text or messages, add_generation_prompt) pairs."""

    def joined(a: Any, b: Any) -> Any:
        if isinstance(a, list) and isinstance(b, list):
            return a + b
        return a + b if isinstance(a, str) and isinstance(b, str) else None

    if "messages" in row:
        pairs = [(row["messages"], False)]
    elif "chosen" in row and "rejected" in row:
        prompt = row.get("prompt")
        pairs = [(joined(prompt, row[k]) if prompt is not None else row[k], False) for k in ("chosen", "rejected")]
    elif "prompt" in row and "completion" in row:
        pairs = [(joined(row["prompt"], row["completion"]), False)]
    elif "text" in row:
        pairs = [(row["text"], False)]
    else:
        pairs = [(row.get("prompt"), True)]
    return [(s, g) for s, g in pairs if isinstance(s, str) or (isinstance(s, list) and s)]


def _stats(lengths: list[int], max_length: int | None, model: str, templated: bool) -> TokenStats:
    ordered = sorted(lengths)

    def rank(q: float) -> int:  # nearest-rank percentile
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]

    stats = TokenStats(
        p50=rank(50),
        p90=rank(90),
        p95=rank(95),
        p99=rank(99),
        max=ordered[-1],
        rows=len(ordered),
        over_max_length=sum(n > max_length for n in ordered) if max_length is not None else None,
        max_length=max_length,
        tokenizer=model,
        chat_template=templated,
        mean=round(sum(ordered) / len(ordered), 2),
    )
    return stats.with_lengths(lengths)
