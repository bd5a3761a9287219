"""jobtrail's model card for a trained model: what it is, what it was made from, and the receipt.

The card PEFT and TRL write knows neither the base model of a local run ("fine-tuned version of
[None]") nor the data, so a training job writes this one into output_dir/final/README.md (pushed with
the model for a remote job) and output_dir/README.md: the base model, the data (source and sha256 or
revision), the method and its settings, the result, and the receipt (job id, attempt, config sha256).

`load_snippet` is the code that loads the result (an adapter on its base model, or the model itself);
the server shows the same code in inspect's next steps (templates/runtime.py loads this file), so
both say it one way. Standard library only and no runtime imports: the server loads this module as
it is, and render.py inlines it into the jobs that import it.
"""

import hashlib
import json
import re
from typing import Any

CARD_NAME = "README.md"
ADAPTER_METHODS = {"lora": "LoRA", "qlora": "QLoRA"}  # peft method → its name in prose
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # a Hub id, not a path on the job's machine
_METHOD_NAMES = {"sft": "SFT", "dpo": "DPO", "kto": "KTO", "reward": "reward modelling", "grpo": "GRPO"}


def config_sha256(config: dict[str, Any]) -> str:
    """The config snapshot's sha256, as the server's ledger records it (canonical JSON)."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def load_snippet(where: str, base_model: str, *, adapter: bool, reward_head: bool = False) -> str:
    """Python that loads the trained model from `where` (a directory or a Hub repo).

    An adapter loads onto its base model (and can be merged into it); a full fine-tune loads alone.
    A reward model is a one-output sequence classifier.
    """
    auto = "AutoModelForSequenceClassification" if reward_head else "AutoModelForCausalLM"
    head = ", num_labels=1" if reward_head else ""
    if not adapter:
        return "\n".join(
            [
                f"from transformers import {auto}, AutoTokenizer",
                "",
                f"model = {auto}.from_pretrained({where!r}{head})",
                f"tokenizer = AutoTokenizer.from_pretrained({where!r})",
            ]
        )
    return "\n".join(
        [
            "from peft import PeftModel",
            f"from transformers import {auto}, AutoTokenizer",
            "",
            f"base = {auto}.from_pretrained({base_model!r}{head})",
            f"model = PeftModel.from_pretrained(base, {where!r})",
            f"tokenizer = AutoTokenizer.from_pretrained({where!r})",
            "model = model.merge_and_unload()  # optional: one plain model, no PEFT needed to run it",
        ]
    )


def trained_model_card(
    config: dict[str, Any],
    *,
    base_model: str,
    where: str,
    run_id: str,
    attempt_id: str,
    data: dict[str, Any] | None,
    result: dict[str, Any],
    packages: dict[str, str | None],
    trackio: dict[str, Any] | None = None,
    reward_head: bool = False,
) -> str:
    """The README.md of a trained model (YAML metadata, then markdown).

    `data`: the job's data manifest (source, kind, sha256 or revision, split, rows, format);
    `result`: global_step, train_loss, train_runtime; `packages`: versions of trl, transformers, peft;
    `trackio`: the run's project and name, and its Space when it has one.
    """
    peft = config.get("peft") or {"method": "none"}
    adapter = peft.get("method") in ADAPTER_METHODS
    method = str(config.get("template") or "training")
    front = _front_matter(config, base_model, adapter, reward_head, method, data)
    kind = f"a {ADAPTER_METHODS[peft['method']]} adapter for" if adapter else "a full fine-tune of"
    base_link = f"[{base_model}](https://huggingface.co/{base_model})" if _is_hub_id(base_model) else f"`{base_model}`"
    lines = [
        front,
        f"# {_title(where, base_model, method, run_id)}",
        "",
        f"This model is {kind} {base_link}, trained with {_METHOD_NAMES.get(method, method)} "
        f"(TRL {packages.get('trl') or '?'}) by jobtrail.",
        "",
        "## Use it",
        "",
        "```python",
        load_snippet(where, base_model, adapter=adapter, reward_head=reward_head),
        "```",
        "",
        "## Training",
        "",
        f"- **Base model**: {base_link}",
        f"- **Data**: {_describe_data(data, config)}",
        f"- **Method**: {_describe_method(method, peft, config)}",
        f"- **Result**: {_describe_result(result)}",
        f"- **Libraries**: {', '.join(f'{name} {version}' for name, version in packages.items() if version)}",
        "",
        "| hyperparameter | value |",
        "|---|---|",
        *(f"| {name} | `{json.dumps(value)}` |" for name, value in sorted((config.get("training_args") or {}).items())),
        "",
        "## Receipt",
        "",
        f"- **Job**: `{run_id}`, attempt `{attempt_id}`",
        f"- **Config sha256**: `{config_sha256(config)}` (the job's config snapshot, as jobtrail's ledger holds it)",
        f"- **Template**: {method} v{config.get('template_version', '?')}",
    ]
    if trackio:
        space = trackio.get("space_id")
        place = f"[{space}](https://huggingface.co/spaces/{space})" if space else "this machine (`jobtrail dashboard`)"
        lines.append(f"- **trackio**: project `{trackio['project']}`, run `{trackio['run']}` on {place}")
    return "\n".join(lines) + "\n"


def _front_matter(
    config: dict[str, Any], base_model: str, adapter: bool, reward_head: bool, method: str, data: dict[str, Any] | None
) -> str:
    """The card's YAML metadata (JSON strings are YAML strings, so values are written with json.dumps)."""
    tags = ["jobtrail", "trl", method, *(["lora"] if adapter else [])]
    meta: list[str] = []
    if _is_hub_id(base_model):  # the Hub links a model to its base only by a Hub id
        meta.append(f"base_model: {json.dumps(base_model)}")
        if adapter:
            tags.append(f"base_model:adapter:{base_model}")
    meta.append(f"library_name: {'peft' if adapter else 'transformers'}")
    meta.append(f"pipeline_tag: {'text-classification' if reward_head else 'text-generation'}")
    meta.append("tags:")
    meta += [f"- {json.dumps(tag)}" for tag in tags]
    if data and data.get("kind") == "hub":
        meta += ["datasets:", f"- {json.dumps(data['source'])}"]
    return "---\n" + "\n".join(meta) + "\n---\n"


def _describe_data(data: dict[str, Any] | None, config: dict[str, Any]) -> str:
    if not data:
        return f"`{(config.get('dataset') or {}).get('source')}`"
    pin = f"sha256 `{data['sha256']}`" if data.get("sha256") else f"revision `{data.get('revision') or 'unknown'}`"
    source = data.get("source")
    shown = f"[{source}](https://huggingface.co/datasets/{source})" if data.get("kind") == "hub" else f"`{source}`"
    mapped = "; mapped with dataset_mapping" if data.get("mapping") else ""
    return f"{shown}, split `{data.get('split')}`, {data.get('rows')} rows (format {data.get('format')}{mapped}), {pin}"


def _describe_method(method: str, peft: dict[str, Any], config: dict[str, Any]) -> str:
    name = _METHOD_NAMES.get(method, method)
    if peft.get("method") in ADAPTER_METHODS:
        target = peft.get("target_modules")
        return (
            f"{name} with {ADAPTER_METHODS[peft['method']]} (r={peft.get('r')}, alpha={peft.get('alpha')}, "
            f"dropout={peft.get('dropout')}, target modules {json.dumps(target)})"
        )
    return f"{name}, full fine-tuning"


def _describe_result(result: dict[str, Any]) -> str:
    parts = [f"{result.get('global_step')} steps"]
    if isinstance(result.get("train_loss"), int | float):
        parts.append(f"training loss {result['train_loss']:.4f}")
    if isinstance(result.get("train_runtime"), int | float):
        parts.append(f"{result['train_runtime']:.0f} s of training")
    return ", ".join(parts)


def _is_hub_id(ref: str) -> bool:
    return bool(_HUB_ID.match(ref)) and not ref.startswith((".", "~"))


def _title(where: str, base_model: str, method: str, run_id: str) -> str:
    """The Hub repo's name; for a local directory, the base model's name, the method and the job."""
    if _is_hub_id(where):
        return where.rsplit("/", 1)[-1]
    return f"{base_model.rstrip('/').rsplit('/', 1)[-1]} {_METHOD_NAMES.get(method, method)} ({run_id})"
