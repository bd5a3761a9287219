"""Memory, time and money of a fine-tuning job before a GPU is rented (issue 4).

    hardware_report(api=None) -> HardwareResult          the flavor catalog (live or bundled)
    estimate_cost(model, values, ...) -> EstimateResult  peak memory, fits, time, cost, timeout
    load_model_config(model) -> dict                     config.json of a directory or Hub id
    record_measurement(ledger, ...) / lookup(ledger, ...) calibration from finished attempts' steady steps
    record_measured_rate(ledger, ...) -> str              a bench's steady-state tokens/s as a calibration

The models are pure (params, memory, cost); hardware, inputs and calibration do the I/O.
Nothing here imports torch or transformers.
"""

from __future__ import annotations

from jobtrail.estimate.calibration import Measurement, lookup, record_measured_rate, record_measurement
from jobtrail.estimate.estimator import estimate_cost, hardware_report
from jobtrail.estimate.hardware import catalog
from jobtrail.estimate.inputs import DataStats, dataset_stats, load_model_config
from jobtrail.results.estimate import EstimateResult, Flavor, FlavorOption, HardwareResult, MemoryBreakdown

__all__ = [
    "DataStats",
    "EstimateResult",
    "Flavor",
    "FlavorOption",
    "HardwareResult",
    "Measurement",
    "MemoryBreakdown",
    "catalog",
    "dataset_stats",
    "estimate_cost",
    "hardware_report",
    "load_model_config",
    "lookup",
    "record_measured_rate",
    "record_measurement",
]
