"""How the ledger's zstd dictionary (src/jobtrail/ledger/zstd_dictionary_v1.txt) was written.

    python tools/ledger_dictionary.py OUT.txt

The dictionary is the text jobtrail itself writes for a default job of each template, local and on HF Jobs:
its spec and config snapshot as the ledger stores them, its script's config section as the renderer writes it,
an attempt's placement (local, HF Jobs) and its last metrics and summary, and one line of each event kind as the
job runtime prints them (with TRL's metric names for each method).
Nothing of the bench (bench/ledger_scale.py) goes into it. zstd refers back into a raw-content dictionary at
the cost of the distance, so what is repeated most (event lines) comes last.

The file in the package is frozen (ledger/dictionary.py checks its sha256): this script is how a next version
would be made, to be added as a new codec beside "d" in ledger/codec.py, never written over the old one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jobtrail.backends.hf_jobs import UV_IMAGE
from jobtrail.ledger.blobs import chunk_lines
from jobtrail.ledger.codec import json_bytes
from jobtrail.methods import METHODS
from jobtrail.models import JobSpec, Placement
from jobtrail.outcomes import events
from jobtrail.preflight.plan import job_values
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import render_script
from jobtrail.templates.runtime import runtime_module
from jobtrail.util.digest import config_json

RUNTIME = runtime_module("_runtime")
f32 = runtime_module("_metrics").as_float32
AT = 1795387852.868
# The metrics TRL's trainers log beside loss/learning_rate/grad_norm/epoch, by method.
TRL_METRICS: dict[str, dict[str, float]] = {
    "sft": {"entropy": 1.2581211, "mean_token_accuracy": 0.666615, "num_tokens": 163840.0},
    "dpo": {
        "rewards/chosen": 0.0123457, "rewards/rejected": -0.0234568, "rewards/accuracies": 0.75,
        "rewards/margins": 0.0358025, "logps/chosen": -312.4567, "logps/rejected": -298.7654,
        "logits/chosen": -1.2345679, "logits/rejected": -1.3456789,
    },
    "kto": {"rewards/chosen_sum": 0.123457, "logps/chosen_sum": -123.4568, "logits/chosen_sum": -12.345679,
            "count/chosen": 4.0, "kl": 0.0123457},
    "grpo": {
        "num_tokens": 81920.0, "completions/mean_length": 123.45, "completions/min_length": 12.0,
        "completions/max_length": 256.0, "completions/clipped_ratio": 0.125, "rewards/reward_len/mean": 0.5,
        "rewards/reward_len/std": 0.25, "reward": 0.5, "reward_std": 0.25, "frac_reward_zero_std": 0.0,
        "kl": 0.0012346, "entropy": 1.2345679, "clip_ratio/region_mean": 0.0,
    },
    "reward": {"accuracy": 0.75, "margin": 1.2345679, "min_reward": -2.3456789, "mean_reward": 0.1234568,
               "max_reward": 2.3456789, "num_tokens": 163840.0},
}  # fmt: skip


def specs() -> Iterator[tuple[JobSpec, str | None, str | None]]:
    """A default job of each method, local and on an HF Jobs flavor, with its output_dir and Hub repo."""
    for method in METHODS:
        for backend, flavor in (("local", None), ("hf-jobs", "a10g-large")):
            spec = JobSpec(
                method=method,
                model="Qwen/Qwen2.5-0.5B-Instruct",
                dataset="org/dataset",
                backend=backend,  # type: ignore[arg-type]
                flavor=flavor,
                timeout_s=3600 if flavor else None,
                hyperparameters={"learning_rate": 2e-05, "max_steps": 500},
            )
            remote = flavor is not None
            yield spec, "jobtrail-output" if remote else None, f"org/{method}-dataset" if remote else None


def receipts() -> Iterator[bytes]:
    for spec, output_dir, push_to in specs():
        config = build_config(spec, job_values(spec), output_dir, push_to=push_to)
        yield json_bytes(spec.model_dump(mode="json"))
        yield config_json(config).encode()
        table = {"flavor": spec.flavor or "", "timeout": f"{spec.timeout_s}s"} if push_to else None
        script = render_script(spec.method, config, hf_jobs=table).encode()
        yield next(chunk for chunk in chunk_lines(script) if b"jobtrail:config" in chunk)


def line(event: str, **fields: Any) -> bytes:
    """An event as the ledger stores it: the job's line less its prefix (eventlog.py)."""
    return (RUNTIME.event_line(event, AT, fields).removeprefix(RUNTIME.EVENT_PREFIX) + "\n").encode()


def event_lines() -> Iterator[bytes]:
    output = "/home/user/.jobtrail/runs/jt-0a1b2c3d/output"
    yield line("start", template="sft", template_version=1, run_id="jt-0a1b2c3d", attempt_id="jt-0a1b2c3d/1")
    yield line(
        "environment", python="3.12.7", platform="Linux-6.8.0-x86_64-with-glibc2.36", host="worker",
        packages={"torch": "2.13.0", "transformers": "5.23.0", "trl": "1.16.0", "peft": "0.21.2",
                  "datasets": "5.2.0", "accelerate": "1.15.0", "tokenizers": "0.23.3"},
        torch="2.13.0", cuda="12.8", device="cuda", gpu={"name": "NVIDIA A10G", "memory_gb": 22.5, "count": 1},
        image=None, world_size=1,
    )  # fmt: skip
    yield line(
        "data_manifest", source="org/dataset", kind="hub", sha256="", split="train", rows=10000,
        columns=["messages"], fingerprint="", mapping=None, format="messages",
    )  # fmt: skip
    yield line("resume", checkpoint=None, step=None, skipped=[])
    for metrics in TRL_METRICS.values():
        yield line("phase", phase="training", max_steps=500, step=0)
        yield line(
            "step", step=10, loss=f32(2.4210548), learning_rate=f32(1.98e-05), grad_norm=f32(0.8584364),
            epoch=0.016, tokens=163840, metrics={**metrics, "num_input_tokens_seen": 163840, "train_runtime": 25.9647,
                                                 "train_tokens_per_second": 17603.317},
        )  # fmt: skip
        yield line("eval", step=100, epoch=0.16, metrics={"eval_loss": 2.1234567, "eval_runtime": 3.4567})
    for state in ("writing", "committed", "superseded"):
        yield line("checkpoint", state=state, step=100, path=f"{output}/checkpoint-100")
    yield line("checkpoint", state="committed", step=500, path=f"{output}/final", manifest_sha256="", files=7,
               bytes=123456789)  # fmt: skip
    yield line("artifact", kind="final_model", path=f"{output}/final")
    yield line(
        "metrics", train_runtime=1234.5678, train_loss=f32(1.2345679), global_step=500,
        train_samples_per_second=12.345, tokens_per_second=12345.678, peak_memory_bytes=12345678901,
    )  # fmt: skip
    for phase in ("tokenizing", "loading_model", "saving", "pushing", "evaluating"):
        yield line("phase", phase=phase)
    yield line("termination", reason="succeeded")


def attempt_receipts(lines: list[bytes]) -> Iterator[bytes]:
    """An attempt's own receipts as its row holds them (codec.PACKED_FIELDS): where it ran, and its last step's
    metrics and summary as the server reads them from the lines above (outcomes/events.py)."""
    workdir = "/home/user/.jobtrail/runs/jt-0a1b2c3d/attempt-1"
    local = Placement(backend="local", host="worker", pid=12345, pgid=12345, workdir=workdir, started_at=AT)
    remote = Placement(
        backend="hf-jobs", host="huggingface.co", workdir=workdir, started_at=AT, remote_id="0123456789abcdef01234567",
        namespace="org", url="https://huggingface.co/jobs/org/0123456789abcdef01234567", flavor="a10g-large",
        image=UV_IMAGE, secret_sources=["HF_TOKEN"],
    )  # fmt: skip
    for placement in (local, remote):
        yield json_bytes(placement.model_dump(mode="json"))
    fields = events.digest([RUNTIME.EVENT_PREFIX + line.decode() for line in lines]).fields
    yield json_bytes(fields["last_metrics"])
    yield json_bytes(fields["summary"])


def main() -> None:
    lines = list(event_lines())
    Path(sys.argv[1]).write_bytes(b"".join([*receipts(), *attempt_receipts(lines), *lines]))


if __name__ == "__main__":
    main()
