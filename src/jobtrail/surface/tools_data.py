"""Planning tools: is the dataset usable, which hardware is there, what will a job need and cost."""

from __future__ import annotations

from jobtrail.estimate import EstimateResult, HardwareResult
from jobtrail.preflight.dataset import DatasetReport
from jobtrail.surface import params as p
from jobtrail.surface.toolspec import READ_ONLY, READS_HUB, ToolArea, tool
from jobtrail.util.arguments import passed_on


class PlanningTools(ToolArea):
    @tool(
        "Validate a dataset",
        "Check a dataset before training: rows, columns, and for each method (sft, dpo, grpo, reward, kto) "
        "READY, NEEDS_MAPPING (with the dataset_mapping to pass to submit) or INCOMPATIBLE, with row-level "
        "problems and samples. With model=, token-length percentiles and rows over max_length.",
        READ_ONLY,
    )
    def validate_dataset(
        self,
        dataset: p.Dataset,
        method: p.MethodFilter = None,
        split: p.Split = p.DEFAULT_SPLIT,
        model: p.TokenizerModel = None,
        max_length: p.LengthLimit = None,
    ) -> DatasetReport:
        return self.service.validate_dataset(dataset, method, split, model, max_length)

    @tool(
        "List hardware",
        "HF Jobs flavors with GPU, count, memory, price per hour, bf16 and peak TFLOPS; live from the Hub when "
        "reachable, else a bundled snapshot (source and date say which).",
        READS_HUB,
    )
    def hardware(self) -> HardwareResult:
        return self.service.hardware()

    @tool(
        "Estimate memory, time and cost",
        "Before renting a GPU: parameters, a memory breakdown (weights, gradients, optimizer, activations, "
        "logits, overhead), which flavors fit, the cheapest that does, hours, cost and a timeout with a 30% "
        "buffer. Weights are never downloaded (config.json only). Uses measurements of earlier jobs when they exist.",
        READS_HUB,
    )
    def estimate_cost(
        self,
        model: p.Model,
        method: p.Method = p.ESTIMATE_DEFAULTS["method"],
        peft: p.PeftKind = p.ESTIMATE_DEFAULTS["peft"],
        dataset: p.StatsDataset = None,
        num_examples: p.NumExamples = None,
        avg_tokens: p.AvgTokens = None,
        max_length: p.MaxLength = p.ESTIMATE_DEFAULTS["max_length"],
        per_device_batch_size: p.BatchSize = p.ESTIMATE_DEFAULTS["per_device_batch_size"],
        gradient_accumulation_steps: p.GradientAccumulation = p.ESTIMATE_DEFAULTS["gradient_accumulation_steps"],
        epochs: p.Epochs = p.ESTIMATE_DEFAULTS["epochs"],
        gradient_checkpointing: p.GradientCheckpointing = p.ESTIMATE_DEFAULTS["gradient_checkpointing"],
        flavor: p.EstimateFlavor = None,
        lora_r: p.LoraRank = p.ESTIMATE_DEFAULTS["lora_r"],
        optimizer: p.Optimizer = p.ESTIMATE_DEFAULTS["optimizer"],
    ) -> EstimateResult:
        return self.service.estimate_cost(**passed_on(locals()))
