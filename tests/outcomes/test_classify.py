"""Termination classification: what jobtrail did, then the job's word, then exit and log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobtrail.models import ExitRecord, TerminationReason as R
from jobtrail.outcomes.classify import classify, explain


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
        (_exit(None, 9), None, ["step 3"], {}, R.PREEMPTED),
        (_exit(137), None, [], {}, R.PREEMPTED),
        (_exit(137), None, ["Out of memory: Killed process 4242 (python)"], {}, R.OOM),
        (_exit(None, 15), None, ["training..."], {}, R.PREEMPTED),
        (_exit(143), None, [], {}, R.PREEMPTED),
        (_exit(1), None, ["ModuleNotFoundError: No module named 'trl'"], {}, R.DEPENDENCY_ERROR),
        (
            _exit(1),
            None,
            ["TypeError: SFTConfig.__init__() got an unexpected keyword argument 'max_seq_length'"],
            {},
            R.CONFIG_ERROR,
        ),
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


CORPUS = sorted((Path(__file__).parent / "failure_logs").glob("*.log"))


def _case(path: Path) -> tuple[str, dict[str, int]]:
    """A corpus file: optional '#exit_code: N' / '#signal: N' header lines, then the log tail."""
    header: dict[str, int] = {}
    body = []
    for line in path.read_text().splitlines():
        if line.startswith(("#exit_code:", "#signal:")):
            key, value = line[1:].split(":")
            header[key] = int(value)
        else:
            body.append(line)
    return "\n".join(body), header


def test_the_corpus_is_large_and_covers_the_reasons():
    assert len(CORPUS) >= 25
    expected = {p.name.split("--")[0] for p in CORPUS}
    assert expected >= {"oom", "auth_error", "hub_error", "bad_input", "config_error", "dependency_error",
                        "infra_transient", "preempted", "succeeded", "timeout", "eval_failed", "unknown"}


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_log_is_classified(path):
    text, header = _case(path)
    verdict = explain(text, header.get("exit_code"), header.get("signal"))
    assert verdict.reason.value == path.name.split("--")[0], verdict
    assert verdict.message


def test_explain_cli_prints_reason_message_and_evidence(tmp_path):
    text, _ = _case(Path(__file__).parent / "failure_logs" / "dependency_error--missing-module.log")
    log = tmp_path / "job.log"
    log.write_text(text)
    out = subprocess.run([sys.executable, "-m", "jobtrail", "explain", str(log), "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    data = json.loads(out.stdout)
    assert data == {"reason": "dependency_error", "message": "A dependency is missing or failed to install.",
                    "evidence": "ModuleNotFoundError: No module named 'peft'"}
    human = subprocess.run([sys.executable, "-m", "jobtrail", "explain", str(log), "--exit-code", "1"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert human.stdout.startswith("dependency_error:")
    missing = subprocess.run([sys.executable, "-m", "jobtrail", "explain", str(tmp_path / "nope.log")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "Fix:" in missing.stderr
