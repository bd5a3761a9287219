"""A learning rate that destroys the model, said before the job runs, scaled by what is trained.

A full fine-tuning update moves every weight, an adapter's only a small added matrix, and preference methods
(DPO, KTO, GRPO) start from a model already tuned: the rate that works differs by orders of magnitude between
them, so one bound for all would either miss a destroying rate or cry wolf at a sound one. Pure.

The ceilings are ten times the highest rate commonly reported to work for each kind of training (full
fine-tuning with SFT or a reward model about 1e-4, with a preference method about 1e-5; an adapter about 2e-3,
5e-4 with a preference method): above them a run is all but sure to blow up. Rates of 1 and more are refused
by the hyperparameter's own range (an error force can pass, as the receipt records). The job watches itself
as well: a run that blows up anyway stops and ends `diverged` (scripts/_watch.py).
"""

from __future__ import annotations

from jobtrail.methods.registry import method_spec
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight.facts import Facts

PREFERENCE = ("dpo", "kto", "grpo")
CEILINGS = {("full", False): 1e-3, ("full", True): 1e-4, ("adapter", False): 2e-2, ("adapter", True): 5e-3}
# What to use instead for full fine-tuning (an adapter's is the method's own default, registry.py): the rates
# TRL's configs default to.
FULL_RATES = {"sft": 2e-5, "reward": 1e-5, "dpo": 1e-6, "kto": 1e-6, "grpo": 1e-6}


def check_learning_rate(spec: JobSpec, facts: Facts) -> list[Finding]:
    values = facts.job_values
    rate = values.training_args.get("learning_rate")
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 < rate < 1:
        return []  # not a number, or out of the field's range: the hyperparameter check says so
    full = values.peft_method == "none"
    trained = "full" if full else "adapter"
    ceiling = CEILINGS[(trained, spec.method in PREFERENCE)]
    if rate <= ceiling:
        return []
    usual = FULL_RATES.get(spec.method, 1e-5) if full else float(method_spec(spec.method).defaults["learning_rate"])
    adapter = {"lora": "a LoRA adapter", "qlora": "a QLoRA adapter"}.get(values.peft_method, "an adapter")
    what = f"{'full fine-tuning' if full else adapter} with {method_spec(spec.method).trl_name}"
    factor = rate / ceiling
    times = f"{factor:,.0f}" if factor >= 10 else f"{factor:.1f}"
    return [
        Finding(
            code="hyperparameters.learning_rate_destroys",
            severity="warning",
            message=f"learning_rate {rate:g} is {times}x the ceiling for {what} ({ceiling:g}, ten times "
            f"the highest rate that usually works): updates that large destroy the model within a few steps. The "
            "job stops itself if its loss blows up (it ends diverged), but the steps until then are spent.",
            fix=f'hyperparameters={{"learning_rate": {usual:g}}} (a usual rate for {what}).',
        )
    ]
