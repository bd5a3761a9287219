"""Termination classification: what jobtrail did, then the job's word, then exit and log."""

from __future__ import annotations

import pytest

from jobtrail.classify import classify
from jobtrail.models import ExitRecord, TerminationReason as R


def _exit(code=None, signal=None, **kw) -> ExitRecord:
    return ExitRecord(exit_code=code, signal=signal, ended_at=1.0, **kw)


@pytest.mark.parametrize(
    ("exit_record", "termination", "tail", "flags", "expected"),
    [
        (_exit(0), {"reason": "succeeded"}, [], {}, R.SUCCEEDED),
        (_exit(0), None, [], {}, R.SUCCEEDED),
        (_exit(None, 15), None, [], {"cancel_requested": True}, R.CANCELLED),
        (_exit(None, 9, timed_out=True), None, [], {}, R.TIMEOUT),
        (None, None, [], {"lost": True}, R.LOST),
        (_exit(1), {"reason": "oom", "message": "CUDA out of memory"}, [], {}, R.OOM),
        (_exit(None, 9), None, ["step 3"], {}, R.OOM),
        (_exit(137), None, [], {}, R.OOM),
        (_exit(None, 15), None, ["training..."], {}, R.PREEMPTED),
        (_exit(143), None, [], {}, R.PREEMPTED),
        (_exit(1), None, ["ModuleNotFoundError: No module named 'trl'"], {}, R.DEPENDENCY_ERROR),
        (_exit(1), None, ["TypeError: SFTConfig.__init__() got an unexpected keyword argument 'max_seq_length'"], {}, R.CONFIG_ERROR),
        (_exit(1), None, ["json.decoder.JSONDecodeError: Expecting value: line 1 column 1"], {}, R.BAD_INPUT),
        (_exit(1), None, ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], {}, R.OOM),
        (_exit(1), None, ["something odd"], {}, R.UNKNOWN),
    ],
)
def test_reason(exit_record, termination, tail, flags, expected):
    verdict = classify(exit_record, termination, tail, **flags)
    assert verdict.reason is expected
    assert verdict.message


def test_evidence_is_the_line_that_decided():
    tail = ["loading", "ModuleNotFoundError: No module named 'peft'", "exiting"]
    verdict = classify(_exit(1), None, tail)
    assert verdict.evidence == "ModuleNotFoundError: No module named 'peft'"


def test_cancel_beats_the_jobs_own_account():
    verdict = classify(_exit(1), {"reason": "unknown"}, [], cancel_requested=True)
    assert verdict.reason is R.CANCELLED
