# /// script
# requires-python = ">=3.11"
# dependencies = ["torch>=2.6", "transformers>=5.23", "peft>=0.21", "datasets>=5.2"]
# ///
"""jobtrail evaluation job: scores one model or checkpoint on held-out data, with provenance.

Metrics: `loss` and `perplexity` (token-weighted negative log-likelihood of the completions),
`exact_match` (greedy or sampled generation compared with the reference answer) and
`pairwise_accuracy` (how often the chosen response outscores the rejected one: by the causal
LM's log-likelihood, or by the reward head of a sequence-classification model). With metrics
null they follow the data: preference pairs → pairwise_accuracy; anything else → loss and
perplexity, plus exact_match when the rows are questions with short answers.

Events: start, environment, data_manifest, then `eval` {state: "started"} with the evaluator,
task set, decoding parameters, checkpoint and scorer (log-likelihood or reward head), and `eval`
{state: "finished"} adding the metrics, the raw outputs file (one JSON line per row, with its
sha256) and sampled failures; then termination. Any failure of the evaluation emits `eval`
{state: "failed", cause, message} and ends the job `eval_failed`, whatever went wrong: it is the
evaluator's attempt that failed, never the training it judges. Runs as it is from scripts/ or
rendered by jobtrail, like sft.py; it trains nothing, so it needs no trl.
"""

import contextlib
import hashlib
import json  # also used by the rendered config block: `CONFIG: dict = json.loads(...)`
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# --- jobtrail:runtime ---
from _runtime import (
    FAILURE_RULES,
    MANIFEST_NAME,
    MARKER_NAME,
    PACKAGES,
    REMOTE_CHECKPOINT,
    announce_phase,
    checkpoint_step,
    classify_exception,
    describe_exception,
    emit,
    package_version,
    phase,
    run_job,
    setup_done,
    verify_checkpoint,
    verify_manifest,
)
from _training import load_train_dataset, map_dataset, start_job

# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict[str, Any] = {
    "template": "evaluate",
    "template_version": 1,
    "model": "Qwen/Qwen2.5-0.5B-Instruct",
    "adapter": None,
    "adapter_hub": None,
    "outputs_repo": None,
    "checkpoint_label": "base",
    "dataset": {"source": "trl-lib/Capybara", "split": "test", "mapping": None},
    "metrics": None,
    "max_new_tokens": 64,
    "temperature": 0.0,
    "max_rows": 200,
    "output_dir": "outputs/evaluate",
    "seed": 42,
}
# --- end jobtrail:config ---

TEMPLATE_VERSION = 1
METRIC_NAMES = ("loss", "perplexity", "exact_match", "pairwise_accuracy")
DEFAULT_SPLIT = "test"  # held-out data; a data file is always its own single split
SHORT_ANSWER_WORDS = 12  # references this short make exact_match meaningful when metrics is null
SAMPLED_FAILURES = 5
CUT_AT = 300  # characters kept of each string in sampled failures (the raw outputs keep all)
RAW_OUTPUTS_NAME = "raw_outputs.jsonl"
# A remote evaluation's machine is gone once it ends: its raw outputs go to the evaluated job's Hub repo, here.
HUB_EVALS_FOLDER = "jobtrail-evals"
WEIGHTS_DIR = "weights"  # where a remote evaluation downloads the pushed model or checkpoint it scores
# A model's generation_config may carry its own decoding settings (an instruct model's top_p,
# top_k, repetition_penalty): they are overridden, so that the recorded decoding is all that
# shaped the outputs (greedy, or pure temperature sampling). Its stop tokens are kept.
PLAIN_DECODING = {"num_beams": 1, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0}
# Every failure of this job is the evaluator's: the server re-runs only the evaluator, and the
# training attempt it judges keeps its own ending. run_job classifies the failure, so the rule
# goes first in its table (the general reading survives as the failed eval event's `cause`).
EVAL_FAILED_RULE = ("eval_failed", lambda exc, current_phase: current_phase == "eval")
# The per-job CONFIG block (job id, paths, dataset): not part of which evaluator ran.
CONFIG_BLOCK = re.compile(r"(?ms)^# --- jobtrail:config ---\n.*?^# --- end jobtrail:config ---\n")


# --- the rows ----------------------------------------------------------------------------------

Turns = str | list[dict[str, Any]]  # a plain string, or chat messages


@dataclass(frozen=True)
class Example:
    """One row in a common shape: a prompt (str, or chat messages) and what should follow it.

    `completion` is what the model is scored on (the chosen response for preference pairs) and
    `reference` its plain text, which exact_match compares generations with.
    """

    prompt: Turns
    completion: Turns
    reference: str
    rejected: Turns | None = None


def data_format(columns: list[str]) -> str:
    """Which evaluation format the columns are in; a ValueError naming what fits otherwise."""
    names = set(columns)
    if {"chosen", "rejected"} <= names:
        return "preference"
    for fmt, needed in (
        ("messages", {"messages"}),
        ("prompt_completion", {"prompt", "completion"}),
        ("question_answer", {"question", "answer"}),
        ("text", {"text"}),
    ):
        if needed <= names:
            return fmt
    raise ValueError(
        f"dataset columns {sorted(names)} fit no evaluation format: need 'messages', 'prompt' + "
        "'completion', 'question' + 'answer', 'text', or 'chosen' + 'rejected' (preference pairs)"
    )


def to_example(row: dict[str, Any], fmt: str, index: int) -> Example:
    """The row as an Example; a ValueError naming the row when its values do not fit `fmt`."""
    try:
        return _EXAMPLE_BUILDERS[fmt](row)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"dataset row {index} does not fit the {fmt} format: {exc}") from exc


def _from_messages(row: dict[str, Any]) -> Example:
    messages = row["messages"]
    if not isinstance(messages, list) or len(messages) < 2 or messages[-1].get("role") != "assistant":
        raise ValueError("'messages' must be a list of turns ending with the assistant's answer")
    return Example(messages[:-1], messages[-1:], messages[-1]["content"])


def _from_prompt_completion(row: dict[str, Any]) -> Example:
    prompt, completion = row["prompt"], row["completion"]
    if type(prompt) is not type(completion) or not isinstance(prompt, str | list):
        raise ValueError("'prompt' and 'completion' must both be strings or both be chat messages")
    return Example(prompt, completion, plain_text(completion))


def _from_question_answer(row: dict[str, Any]) -> Example:
    # A question is asked as a chat turn: how an instruction-following model is meant to be asked.
    question, answer = row["question"], row["answer"]
    if not isinstance(question, str) or not isinstance(answer, str | int | float):
        raise ValueError("'question' must be a string and 'answer' a string or a number")
    answer = str(answer)
    return Example([{"role": "user", "content": question}], [{"role": "assistant", "content": answer}], answer)


def _from_text(row: dict[str, Any]) -> Example:
    if not isinstance(row["text"], str):
        raise ValueError("'text' must be a string")
    return Example("", row["text"], row["text"])


def _from_preference(row: dict[str, Any]) -> Example:
    # Without a prompt column the pair shares its prompt inside both responses; that shared
    # prefix scores the same under both, so comparing whole sequences compares the responses.
    chosen, rejected = row["chosen"], row["rejected"]
    prompt = row.get("prompt") or ("" if isinstance(chosen, str) else [])
    if not (type(prompt) is type(chosen) is type(rejected)) or not isinstance(chosen, str | list):
        raise ValueError("'prompt', 'chosen' and 'rejected' must all be strings or all chat messages")
    return Example(prompt, chosen, plain_text(chosen), rejected)


_EXAMPLE_BUILDERS = {
    "messages": _from_messages,
    "prompt_completion": _from_prompt_completion,
    "question_answer": _from_question_answer,
    "text": _from_text,
    "preference": _from_preference,
}


def plain_text(value: Turns) -> str:
    """What a person reads: the string, or the messages' contents one per line."""
    return value if isinstance(value, str) else "\n".join(str(m["content"]) for m in value)


def load_examples(spec: dict[str, Any], max_rows: int | None) -> tuple[list[Example], dict[str, Any]]:
    """The first max_rows rows of the split as Examples, and the `data_manifest` fields."""
    spec = {**spec, "split": spec.get("split") or DEFAULT_SPLIT}
    dataset, manifest = load_train_dataset(spec)
    dataset = map_dataset(dataset, spec.get("mapping"))
    if len(dataset) == 0:
        raise ValueError("dataset has no rows to evaluate")
    fmt = data_format(dataset.column_names)
    rows = dataset.select(range(min(len(dataset), max_rows or len(dataset))))
    examples = [to_example(row, fmt, i) for i, row in enumerate(rows)]
    return examples, {**manifest, "mapping": spec.get("mapping"), "format": fmt, "rows_evaluated": len(examples)}


# --- what is evaluated, and how ------------------------------------------------------------------


def choose_metrics(requested: list[str] | None, fmt: str, examples: list[Example], reward_head: bool) -> list[str]:
    """The requested metrics after checking they fit the data and model, or the data's defaults."""
    if not requested:
        requested = default_metrics(fmt, examples)
    unknown = [name for name in requested if name not in METRIC_NAMES]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; use any of {list(METRIC_NAMES)}")
    misfits = [name for name in requested if metric_misfit(name, fmt, reward_head)]
    if misfits:
        raise ValueError("; ".join(metric_misfit(name, fmt, reward_head) for name in misfits))
    return list(dict.fromkeys(requested))


def default_metrics(fmt: str, examples: list[Example]) -> list[str]:
    if fmt == "preference":
        return ["pairwise_accuracy"]
    metrics = ["loss", "perplexity"]
    if fmt in ("prompt_completion", "question_answer") and all(
        len(example.reference.split()) <= SHORT_ANSWER_WORDS for example in examples
    ):
        metrics.append("exact_match")
    return metrics


def metric_misfit(name: str, fmt: str, reward_head: bool) -> str:
    """Why `name` cannot be computed here ('' when it can)."""
    if name == "pairwise_accuracy":
        if fmt == "preference":
            return ""
        return f"pairwise_accuracy needs preference pairs ('chosen' + 'rejected'), not {fmt} rows"
    if reward_head:
        return f"{name} needs a causal language model; a reward model only scores preference pairs"
    if fmt == "preference":
        return f"{name} does not apply to preference pairs; use pairwise_accuracy"
    if name == "exact_match" and fmt == "text":
        return "exact_match needs a prompt and a reference answer; plain 'text' rows have neither"
    return ""


def describe_checkpoint(config: dict[str, Any]) -> dict[str, Any]:
    """The weights evaluated, tied to their commit: the marker's manifest sha256 and step.

    A jobtrail checkpoint that does not verify is refused (it may be half written); weights
    from elsewhere (a Hub id, a plain model directory) carry no commit, and say so.
    """
    weights = config.get("adapter") or config["model"]
    label = config.get("checkpoint_label") or str(weights)
    commit: dict[str, Any] = {"manifest_sha256": None, "step": None}
    path = Path(str(weights)).expanduser()
    if path.is_dir() and ((path / MARKER_NAME).exists() or checkpoint_step(path) is not None):
        ok, why = verify_checkpoint(path)
        if not ok:
            raise ValueError(f"checkpoint {path} is not a verified commit ({why}); evaluate a committed one")
        marker = json.loads((path / MARKER_NAME).read_text())
        commit = {"manifest_sha256": marker["manifest_sha256"], "step": marker["step"]}
    return {"label": label, "model": config["model"], "adapter": config.get("adapter"), **commit}


def evaluated_weights(config: dict[str, Any], output_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what is loaded: model and adapter, as from_pretrained takes them; the record of the weights evaluated).

    CONFIG's adapter is a directory, or with adapter_hub the Hub repo a remote job pushed to, downloaded here.
    A directory without adapter_config.json is a whole model (a job trained with peft "none"): it is the model.
    """
    hub, adapter = config.get("adapter_hub"), config.get("adapter")
    local: str | None
    if hub is not None and adapter:
        local, record = fetch_pushed(config, hub, output_dir / WEIGHTS_DIR)
    else:
        local, record = adapter, describe_checkpoint(config)
    if local and Path(local).is_dir() and not (Path(local) / "adapter_config.json").is_file():
        return {"model": local, "adapter": None}, record
    return {"model": config["model"], "adapter": local}, record


def fetch_pushed(config: dict[str, Any], hub: dict[str, Any], target: Path) -> tuple[str, dict[str, Any]]:
    """A remote job's final model (its Hub repo's root) or pushed checkpoint (its REMOTE_CHECKPOINT folder),
    downloaded at the commit preflight pinned (else the head, pinned now) and verified against its manifest
    (a checkpoint's commit marker; the final model is pushed without one): its local copy, and its record."""
    from huggingface_hub import HfApi, snapshot_download

    repo_id, subfolder, label = config["adapter"], hub.get("subfolder"), config["checkpoint_label"]
    revision = HfApi().model_info(repo_id, revision=hub.get("revision")).sha
    where = f"{repo_id}/{subfolder} at commit {revision}" if subfolder else f"{repo_id} at commit {revision}"
    if subfolder:
        snapshot_download(repo_id, revision=revision, allow_patterns=[f"{subfolder}/*"], local_dir=str(target))
        local = target / subfolder
        ok, why = verify_checkpoint(local)
        if not ok:
            raise ValueError(f"{where} is not a verified commit ({why})")
        marker = json.loads((local / MARKER_NAME).read_text())
        manifest_sha256, step = marker["manifest_sha256"], marker["step"]
        wanted = checkpoint_step(Path(label))
        if wanted is not None and step != wanted:
            raise ValueError(f"{where} holds checkpoint-{step}, not the {label} asked for")
    else:
        ignored = [f"{REMOTE_CHECKPOINT}/*", f"{HUB_EVALS_FOLDER}/*"]
        snapshot_download(repo_id, revision=revision, ignore_patterns=ignored, local_dir=str(target))
        local = target
        if not (local / MANIFEST_NAME).is_file():
            raise ValueError(f"{where} holds no {MANIFEST_NAME}: it is not a model a jobtrail job pushed")
        manifest = (local / MANIFEST_NAME).read_bytes()
        problem = verify_manifest(local, manifest)
        if problem:
            raise ValueError(f"{where} does not match its manifest ({problem})")
        manifest_sha256, step = hashlib.sha256(manifest).hexdigest(), json.loads(manifest).get("step")
    record = {"label": label, "model": config["model"], "adapter": repo_id, "revision": revision}
    return str(local), {**record, "subfolder": subfolder, "manifest_sha256": manifest_sha256, "step": step}


def evaluator_record() -> dict[str, Any]:
    """Which evaluator ran: this very file (config included, once rendered), its packages, and
    their identity (sha256), which is the same for every job the same evaluator scores."""
    source = Path(__file__).read_bytes()
    packages = {name: package_version(name) for name in PACKAGES}
    return {
        "template": CONFIG.get("template", "evaluate"),
        "template_version": CONFIG.get("template_version", TEMPLATE_VERSION),
        "sha256": evaluator_sha256(source.decode(), packages),
        "script_sha256": hashlib.sha256(source).hexdigest(),
        "packages": packages,
    }


def evaluator_sha256(script: str, packages: dict[str, str | None]) -> str:
    """The evaluator's identity: its code (the template and the runtime inlined into it) without
    the per-job CONFIG, and the package versions it ran with."""
    code = CONFIG_BLOCK.sub("", script)
    return hashlib.sha256((code + json.dumps(packages, sort_keys=True)).encode()).hexdigest()


def task_set_record(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "dataset": manifest["source"],
        "revision_or_sha256": manifest.get("sha256") or manifest.get("revision"),
        "split": manifest["split"],
        "rows": manifest["rows_evaluated"],
        "rows_available": manifest["rows"],
        "format": manifest["format"],
        "mapping": manifest["mapping"],
    }


def decoding_record(config: dict[str, Any]) -> dict[str, Any]:
    temperature = float(config["temperature"])
    return {
        "max_new_tokens": int(config["max_new_tokens"]),
        "temperature": temperature,
        "do_sample": temperature > 0,  # temperature 0 means greedy decoding
        "seed": int(config["seed"]),
        **PLAIN_DECODING,
    }


# --- the model -----------------------------------------------------------------------------------


def has_reward_head(weights: dict[str, Any]) -> bool:
    """A sequence-classification model (a reward model), judged from the adapter or model config."""
    if weights.get("adapter"):
        from peft import PeftConfig

        return str(PeftConfig.from_pretrained(weights["adapter"]).task_type) == "SEQ_CLS"
    from transformers import AutoConfig

    architectures = AutoConfig.from_pretrained(weights["model"]).architectures or []
    return any(name.endswith("ForSequenceClassification") for name in architectures)


def load_scored_model(weights: dict[str, Any], reward_head: bool) -> tuple[Any, Any]:
    """The model (with the adapter on top, if any) in eval mode on the best device, and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float32
    if device == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if reward_head:
        model = AutoModelForSequenceClassification.from_pretrained(weights["model"], num_labels=1, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(weights["model"], dtype=dtype)
    adapter = weights.get("adapter")
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    # A training job saves the tokenizer it trained with next to the adapter: prefer that one.
    has_tokenizer = adapter and (Path(adapter) / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(adapter if has_tokenizer else weights["model"])
    return model.to(device).eval(), tokenizer


def render(tokenizer: Any, prompt: Turns, completion: Turns) -> tuple[list[int], list[int]]:
    """Token ids of the prompt and of the completion that follows it (chat template applied).

    Tokenized apart, so the completion's tokens are exactly those scored and generated after
    the prompt; a chat template already holds its special tokens, so none are added to it.
    """
    if isinstance(prompt, str) or isinstance(completion, str):  # both are, or neither (the row builders check)
        return (tokenizer(prompt)["input_ids"], tokenizer(completion, add_special_tokens=False)["input_ids"])
    prompt_text = ""
    if prompt:  # an implicit-prompt preference pair has none: the response is the whole text
        prompt_text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    full_text = tokenizer.apply_chat_template(prompt + completion, tokenize=False)
    if not full_text.startswith(prompt_text):
        raise ValueError("the chat template does not render the prompt as the start of the conversation")
    completion_text = full_text[len(prompt_text) :]
    prompt_ids, completion_ids = (
        tokenizer(text, add_special_tokens=False)["input_ids"] for text in (prompt_text, completion_text)
    )
    return prompt_ids, completion_ids


# --- the metrics ---------------------------------------------------------------------------------


def completion_nll(model: Any, prompt_ids: list[int], completion_ids: list[int]) -> tuple[float, int]:
    """(sum of the completion tokens' negative log-likelihood, how many were scored).

    Only the logits that predict completion tokens are computed (logits_to_keep): a large
    vocabulary's logits over a long prompt would otherwise cost more memory than the model.
    """
    import torch

    ids = prompt_ids + completion_ids
    first = max(len(prompt_ids), 1)  # the very first token has nothing to be predicted from
    scored = len(ids) - first
    if scored <= 0:
        raise ValueError("a row has an empty completion: nothing to score")
    input_ids = torch.tensor([ids], device=model.device)
    logits = model(input_ids=input_ids, logits_to_keep=scored + 1).logits[0, :-1].float()
    targets = input_ids[0, first:]
    nll = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
    return float(nll), scored


def generate(model: Any, tokenizer: Any, prompt_ids: list[int], decoding: dict[str, Any]) -> str:
    import torch

    input_ids = torch.tensor([prompt_ids], device=model.device)
    sampling: dict[str, Any] = {"do_sample": False}
    if decoding["do_sample"]:
        sampling = {"do_sample": True, "temperature": decoding["temperature"]}
    output = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=decoding["max_new_tokens"],
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        **sampling,
        **PLAIN_DECODING,
    )
    text: str = tokenizer.decode(output[0, len(prompt_ids) :], skip_special_tokens=True)
    return text.strip()


def normalize_answer(text: str) -> str:
    """Case, spacing and a final full stop do not make an answer wrong."""
    return " ".join(text.lower().split()).rstrip(".").strip()


def reward_score(model: Any, prompt_ids: list[int], completion_ids: list[int]) -> float:
    import torch

    input_ids = torch.tensor([prompt_ids + completion_ids], device=model.device)
    return float(model(input_ids=input_ids).logits[0, 0])


def preference_score(model: Any, tokenizer: Any, prompt: Turns, response: Turns, reward_head: bool) -> float:
    """How much the model prefers `response`: its reward, or its log-likelihood after the prompt."""
    prompt_ids, response_ids = render(tokenizer, prompt, response)
    if reward_head:
        return reward_score(model, prompt_ids, response_ids)
    nll, _ = completion_nll(model, prompt_ids, response_ids)
    return -nll


def score_examples(
    model: Any, tokenizer: Any, examples: list[Example], metrics: list[str], decoding: dict[str, Any], reward_head: bool
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(aggregate metrics, one raw output record per row); rows are scored one at a time, unpadded."""
    import torch

    totals = {"nll": 0.0, "tokens": 0, "correct": 0}
    raw: list[dict[str, Any]] = []
    with torch.inference_mode():
        for index, example in enumerate(examples):
            record: dict[str, Any] = {
                "index": index,
                "prompt": plain_text(example.prompt),
                "reference": example.reference,
            }
            record.update(score_example(model, tokenizer, example, metrics, decoding, reward_head))
            totals["nll"] += record.get("nll", 0.0)
            totals["tokens"] += record.get("tokens", 0)
            totals["correct"] += bool(record.get("correct"))
            raw.append(record)
    return aggregate(metrics, totals, len(examples)), raw


def score_example(
    model: Any, tokenizer: Any, example: Example, metrics: list[str], decoding: dict[str, Any], reward_head: bool
) -> dict[str, Any]:
    """This row's raw outputs for the chosen metrics."""
    if "pairwise_accuracy" in metrics and example.rejected is not None:  # metric_misfit: preference rows only
        chosen = preference_score(model, tokenizer, example.prompt, example.completion, reward_head)
        rejected = preference_score(model, tokenizer, example.prompt, example.rejected, reward_head)
        return {
            "rejected": plain_text(example.rejected),
            "chosen_score": chosen,
            "rejected_score": rejected,
            "correct": chosen > rejected,
        }
    prompt_ids, completion_ids = render(tokenizer, example.prompt, example.completion)
    record: dict[str, Any] = {}
    if {"loss", "perplexity"} & set(metrics):
        nll, tokens = completion_nll(model, prompt_ids, completion_ids)
        record.update(nll=nll, tokens=tokens, loss=nll / tokens)
    if "exact_match" in metrics:
        output = generate(model, tokenizer, prompt_ids, decoding)
        record.update(output=output, correct=normalize_answer(output) == normalize_answer(example.reference))
    return record


def aggregate(metrics: list[str], totals: dict[str, float], rows: int) -> dict[str, float]:
    """Loss is token-weighted over all rows (so perplexity is the corpus's); accuracies per row."""
    values: dict[str, float] = {}
    if totals["tokens"]:
        loss = totals["nll"] / totals["tokens"]
        values.update(loss=loss, perplexity=math.exp(min(loss, 700.0)))  # exp overflows past ~709
    values.update({name: totals["correct"] / rows for name in ("exact_match", "pairwise_accuracy")})
    return {name: values[name] for name in metrics}


def sampled_failures(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first failing rows, long strings cut: enough to see what goes wrong in the log."""
    failing = [record for record in raw if record.get("correct") is False][:SAMPLED_FAILURES]
    return [{key: shorten(value) for key, value in record.items()} for record in failing]


def shorten(value: Any) -> Any:
    return value[:CUT_AT] + "..." if isinstance(value, str) and len(value) > CUT_AT else value


def write_raw_outputs(output_dir: Path, raw: list[dict[str, Any]]) -> tuple[Path, str]:
    """(path, sha256) of the raw outputs: one JSON line per evaluated row."""
    path = output_dir / RAW_OUTPUTS_NAME
    data = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in raw).encode()
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def keep_raw_outputs(path: Path, repo_id: str | None, run_id: str) -> str | None:
    """Where the raw outputs stay: `path`, beside a local job; a remote evaluation's machine is gone once it
    ends, so they are uploaded to the evaluated job's Hub repo (`repo_id`): their URL at that commit. An upload
    that fails costs the file, never the metrics: None, and an alert says why."""
    if not repo_id:
        return str(path)
    from huggingface_hub import HfApi, hf_hub_url

    path_in_repo = f"{HUB_EVALS_FOLDER}/{run_id}/{RAW_OUTPUTS_NAME}"
    try:
        commit = HfApi().upload_file(
            path_or_fileobj=str(path),
            path_in_repo=path_in_repo,
            repo_id=repo_id,
            commit_message=f"jobtrail: evaluation {run_id}, raw outputs",
        )
    except Exception as exc:  # noqa: BLE001 - the evaluation stands without its raw outputs
        emit(
            "alert",
            code="raw_outputs_not_kept",
            message=f"The raw outputs could not be uploaded to {repo_id}: {describe_exception(exc)}",
            fix=f"The metrics and sampled failures are in the record; to keep every row's output, evaluate again "
            f"with an HF_TOKEN that can write to {repo_id}.",
        )
        return None
    return hf_hub_url(repo_id, path_in_repo, revision=commit.oid)


# --- the job -------------------------------------------------------------------------------------


@contextlib.contextmanager
def evaluation() -> Iterator[None]:
    """Tag every failure inside as the eval phase, after emitting the failed eval event.

    The cause is classified here, before phase("eval") tags the exception, so it is the runtime's
    general reading (bad_input, oom, dependency_error ...), kept for the diagnosis.
    """
    with phase("eval"):
        try:
            yield
        except Exception as exc:
            emit("eval", state="failed", cause=classify_exception(exc), message=describe_exception(exc))
            raise


def main() -> None:
    with evaluation():
        job = start_job(CONFIG, "evaluate", TEMPLATE_VERSION)
        examples, manifest = load_examples(CONFIG["dataset"], CONFIG.get("max_rows"))
        emit("data_manifest", **manifest)
        announce_phase("loading_model")
        weights, checkpoint = evaluated_weights(CONFIG, job.output_dir)
        reward_head = has_reward_head(weights)
        metrics = choose_metrics(CONFIG.get("metrics"), manifest["format"], examples, reward_head)
        record: dict[str, Any] = {
            "scorer": "reward_head" if reward_head else "log_likelihood",
            "evaluator": evaluator_record(),
            "task_set": task_set_record(manifest),
            "decoding": decoding_record(CONFIG),
            "checkpoint": checkpoint,
        }
        emit("eval", state="started", metric_names=metrics, **record)
        from transformers import set_seed

        set_seed(record["decoding"]["seed"])
        model, tokenizer = load_scored_model(weights, reward_head)
        setup_done()
        announce_phase("evaluating")
        values, raw = score_examples(model, tokenizer, examples, metrics, record["decoding"], reward_head)
        raw_path, raw_sha256 = write_raw_outputs(job.output_dir, raw)
        emit(
            "eval",
            state="finished",
            metrics=values,
            raw_outputs=keep_raw_outputs(raw_path, CONFIG.get("outputs_repo"), job.run_id),
            raw_outputs_sha256=raw_sha256,
            sampled_failures=sampled_failures(raw),
            **record,
        )


if __name__ == "__main__":
    FAILURE_RULES.insert(0, EVAL_FAILED_RULE)
    run_job(main)
