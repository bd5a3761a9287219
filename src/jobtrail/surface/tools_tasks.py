"""Task tools: evaluate a model, convert one to GGUF, and report what past attempts cost."""

from __future__ import annotations

from jobtrail.requests import ConvertRequest, EvaluateRequest
from jobtrail.results.tasks import ConvertResult, EvaluateResult, ReportResult
from jobtrail.surface import params as p
from jobtrail.surface.toolspec import READ_ONLY, STARTS_JOB, ToolArea, tool


class TaskTools(ToolArea):
    # Each tool's typed signature is its own input schema (arguments declared in params.py): alike, not copies.
    @tool(
        "Evaluate a model or a job's checkpoint",
        "Run an evaluation job (same backend as the job): loss/perplexity on held-out data, exact match for "
        "question-answer data (greedy generation), pairwise accuracy for preference data. Give job_id (its final "
        "model, or checkpoint= one of its committed checkpoints; a remote job's are read from its Hub repo, at the "
        "commit that pushed them) or model (a base model). The record keeps the "
        "evaluator's script sha256 and package versions, the task set's sha256 and rows, decoding parameters, "
        "raw outputs and sampled failures; inspect of the evaluated job lists it.",
        STARTS_JOB,
    )
    def evaluate(
        self,
        dataset: p.HeldOutDataset,
        job_id: p.EvaluatedJob = None,
        model: p.EvaluatedModel = None,
        split: p.EvalSplit = None,
        checkpoint: p.EvalCheckpoint = None,
        metrics: p.Metrics = None,
        max_new_tokens: p.MaxNewTokens = p.DEFAULT_MAX_NEW_TOKENS,
        temperature: p.Temperature = p.DEFAULT_TEMPERATURE,
        after: p.EvaluateAfter = None,
    ) -> EvaluateResult:
        request = EvaluateRequest(
            dataset=dataset,
            job_id=job_id,
            model=model,
            split=split,
            checkpoint=checkpoint,
            metrics=metrics,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            after=after,
        )
        return self.service.evaluate(request)

    @tool(
        "Convert to GGUF",
        "Turn a trained adapter or model into GGUF files for llama.cpp, Ollama and LM Studio: merge the LoRA "
        "adapter, convert with llama.cpp's converter to F16 (always kept), quantize (Q4_K_M, Q5_K_M, Q8_0, ...), "
        "and verify every file (read back; F16/Q8_0 logits compared with the merged model). source: a job id "
        "(its final model, or checkpoint=...), a local model/adapter directory, or a Hub id. Runs as a job.",
        STARTS_JOB,
    )
    def convert_gguf(
        self,
        source: p.ConvertSource,
        quantizations: p.Quantizations = p.DEFAULT_QUANTIZATIONS,
        output: p.ConvertOutput = None,
        backend: p.ConvertBackend = p.DEFAULT_BACKEND,
        checkpoint: p.ConvertCheckpoint = None,
        pre_tokenizer: p.PreTokenizer = None,
        after: p.ConvertAfter = None,
    ) -> ConvertResult:
        request = ConvertRequest(
            source=source,
            quantizations=quantizations,
            output=output,
            backend=backend,
            checkpoint=checkpoint,
            pre_tokenizer=pre_tokenizer,
            after=after,
        )
        return self.service.convert_gguf(request)

    @tool(
        "Report on recent attempts",
        "Attempts, GPU-hours and cost of attempts that ended in the last `days`, grouped by termination_reason "
        "(default), method, backend, flavor or model. Use it to see what failures cost.",
        READ_ONLY,
    )
    def report(self, days: p.Days = p.DEFAULT_DAYS, group_by: p.GroupBy = p.DEFAULT_GROUP_BY) -> ReportResult:
        return self.service.report(days=days, group_by=group_by)
