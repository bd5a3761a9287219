"""Planning tools: is the dataset usable, which hardware is there, what will a job need and cost."""

from __future__ import annotations

from jobtrail.requests import EstimateRequest
from jobtrail.results.dataset import DatasetReport
from jobtrail.results.estimate import EstimateResult, HardwareResult
from jobtrail.surface import params as p
from jobtrail.surface.toolspec import READ_ONLY, READS_HUB, ToolArea, tool


class PlanningTools(ToolArea):
    # Each tool's typed signature is its own input schema (arguments declared in params.py): alike, not copies.
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
        "logits, overhead), which flavors fit and the cheapest that does; with the data's size (dataset, "
        "num_examples and avg_tokens, or max_steps) also hours, cost and a timeout with a 30% buffer. The "
        "hyperparameters are submit's, by the same names and defaults. Weights are never downloaded "
        "(config.json only). Uses measurements of earlier jobs when they exist.",
        READS_HUB,
    )
    def estimate_cost(
        self,
        model: p.Model,
        method: p.Method = p.DEFAULT_ESTIMATE_METHOD,
        peft: p.PeftKind = None,
        dataset: p.StatsDataset = None,
        num_examples: p.NumExamples = None,
        avg_tokens: p.AvgTokens = None,
        max_length: p.MaxLength = None,
        per_device_train_batch_size: p.BatchSize = None,
        gradient_accumulation_steps: p.GradientAccumulation = None,
        num_train_epochs: p.Epochs = None,
        max_steps: p.MaxSteps = None,
        gradient_checkpointing: p.GradientCheckpointing = None,
        flavor: p.EstimateFlavor = None,
        lora_r: p.LoraRank = None,
        optim: p.Optimizer = None,
        num_processes: p.NumProcesses = None,
    ) -> EstimateResult:
        request = EstimateRequest(
            model=model,
            method=method,
            peft=peft,
            dataset=dataset,
            num_examples=num_examples,
            avg_tokens=avg_tokens,
            max_length=max_length,
            per_device_train_batch_size=per_device_train_batch_size,
            gradient_accumulation_steps=gradient_accumulation_steps,
            num_train_epochs=num_train_epochs,
            max_steps=max_steps,
            gradient_checkpointing=gradient_checkpointing,
            flavor=flavor,
            lora_r=lora_r,
            optim=optim,
            num_processes=num_processes,
        )
        return self.service.estimate_cost(request)
