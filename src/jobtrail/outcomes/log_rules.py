"""The rules for loose log lines: the stack's commonest failures in their plainest words. Pure.

`classify` tries them on a log's lines, newest first, after the libraries' own sentences (`families`) and when no
traceback decided (`causes`): a job killed mid-line, a log that kept no traceback, a tool that prints one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.causes import CONFIG, DATA, DEPENDENCY, HUB_FAILED, OOM, REFUSED, TRANSIENT


@dataclass(frozen=True)
class LogRule:
    reason: R
    message: str
    pattern: re.Pattern[str]


def _rule(reason: R, message: str, *alternatives: str, ignore_case: bool = True) -> LogRule:
    return LogRule(reason, message, re.compile("|".join(alternatives), re.IGNORECASE if ignore_case else 0))


# Scanning the tail from the newest line, the first line that matches any rule decides; within
# a line, earlier rules win (so a 403 while pushing is hub_error before it can be auth_error,
# and a job timeout before a read timeout).
LOG_RULES: list[LogRule] = [
    _rule(
        R.TIMEOUT,
        "The job ran past its timeout.",
        r"Job timed out",
        r"exceeded (its|the) (timeout|maximum duration)",
        r"^\s*(?:Error: )?(?:Timeout|Time limit) (?:expired|exceeded|reached)[.!]?\s*$",  # a harness's word alone
    ),
    _rule(
        R.HUB_ERROR,
        HUB_FAILED,
        r"\b40[13]\b.*(/commit/|/preupload/|upload|push)",
        r"Failed to push",
        r"push_to_hub.*(failed|error)",
        r"The push command with PID \d+ failed",  # transformers' background push of a checkpoint
        r"cannot lock ref 'refs/heads/",  # the Hub moved the branch under a concurrent push
    ),
    _rule(
        R.OOM,
        OOM,
        r"CUDA out of memory",
        r"OutOfMemoryError",
        r"Cannot allocate memory",
        r"can't allocate memory",
        r"oom-kill",
        r"out of memory: Killed process",
    ),
    _rule(
        R.AUTH_ERROR,
        REFUSED,
        r"not in the authorized list",
        r"Invalid credentials in Authorization header",
        r"\b401\b.*Unauthorized",
        r"LocalTokenNotFoundError",
        r"Token is required",
        r"DENIED update refs/\S+: forbidden",  # git push to the Hub with a read token
        r"You don't have the rights to",  # the Hub's refusal to create or write in a namespace (its JSON body)
    ),
    # Case matters for the next two: their words are Python's and the installers' exact spelling.
    _rule(
        R.DEPENDENCY_ERROR,
        DEPENDENCY,
        r"ModuleNotFoundError",
        r"ImportError",
        r"No matching distribution",
        r"Failed to build",
        r"No solution found when resolving",
        ignore_case=False,
    ),
    _rule(
        R.CONFIG_ERROR,
        CONFIG,
        r"got an unexpected keyword argument",
        r"eval_strategy.*eval_dataset",
        r"doesn't support bf16",
        r"chat_template is not set",
        r"Cannot use chat template",
        ignore_case=False,
    ),
    _rule(
        R.BAD_INPUT,
        DATA,
        r"JSONDecodeError",
        r"DatasetGenerationError",
        r"JSON parse error",
        r"^KeyError: '",
        r"Column '.*' not in the dataset",
        r"\bArrow(?:Invalid|TypeError)\b",  # pyarrow reading the data files (a value of another type, a bad row)
    ),
    _rule(
        R.INFRA_TRANSIENT,
        TRANSIENT,
        r"ReadTimeout",
        r"ConnectTimeout",
        r"read operation timed out",
        r"Read timed out",
        r"Connection reset",
        r"ConnectionError",
        r"\b5\d\d Server Error",
        r"\b(?:Internal |Unhandled )?server error\b",
        r"\bHTTP(?: Error| status(?: code)?)?:? 5\d\d\b",
        r"Bad Gateway",
        r"Service Unavailable",
        r"Gateway Time-?out",
        r"\b(?:HTTP )?(?:response|status) code:? 5\d\d\b",  # a client library's words (TF's GCS filesystem, curl)
    ),
]
