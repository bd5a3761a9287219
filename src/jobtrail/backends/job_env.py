"""A local job's environment: an allow-list of the server's, never the whole of it.

A job runs code nobody at jobtrail wrote (a reward file, a model's remote code, a dependency), so what it
can read of the server must be what the user handed over: the variables a training job needs to run on
this machine (`RULES`, each with its reason), the names `JOBTRAIL_JOB_ENV_PASS` adds, the attempt's
secrets, and jobtrail's own per-attempt variables (the request's `env`, its output directory). Never
jobtrail's settings or credentials (JOBTRAIL_AUTH_TOKEN, JOBTRAIL_LEDGER_URL ...), and never, through a
prefix, a name that looks like a credential (NVIDIA_API_KEY, HF_TOKEN): those reach a job only as secrets.

An HF job's environment is built from the request alone (hf_jobs.py): nothing of the server's goes there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from jobtrail.errors import InvalidRequestError
from jobtrail.models import LaunchRequest
from jobtrail.util.redaction import looks_like_credential_name

PASS_ENV = "JOBTRAIL_JOB_ENV_PASS"
# Where the job writes when its CONFIG names no output_dir (scripts/_runtime.py reads it).
OUTPUT_DIR_ENV = "JOBTRAIL_OUTPUT_DIR"
OWN_PREFIX = "JOBTRAIL_"  # jobtrail's own variables: its settings, credentials and per-attempt values
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: `^...$` lets a trailing newline through

# name, or prefix ending in "*" -> (passed, why). The first rule that matches decides; a name no rule
# matches is withheld. The withheld rows say why a name a job might be expected to get is not given.
RULES: dict[str, tuple[bool, str]] = {
    "PATH": (True, "the job's tools: compilers for kernels, git, nvidia-smi"),
    "HOME": (True, "libraries keep caches and config under it (~/.cache/huggingface, ~/.triton)"),
    "USER": (True, "getpass and cache paths ask who runs the job"),
    "LOGNAME": (True, "getpass falls back to it"),
    "LANG": (True, "the locale: text decoding and printed numbers"),
    "LANGUAGE": (True, "the locale's message language"),
    "LC_*": (True, "the locale, one category at a time"),
    "TZ": (True, "timestamps the job prints and saves"),
    "TMPDIR": (True, "where tempfile writes (a small /tmp fills up otherwise)"),
    "TMP": (True, "tempfile's fallback names"),
    "TEMP": (True, "tempfile's fallback names"),
    "http_proxy": (True, "reaching the Hub where the network needs a proxy (values with a password are redacted)"),
    "https_proxy": (True, "as http_proxy"),
    "no_proxy": (True, "hosts reached without the proxy"),
    "all_proxy": (True, "as http_proxy, for every scheme"),
    "HTTP_PROXY": (True, "as http_proxy (libraries read either case)"),
    "HTTPS_PROXY": (True, "as http_proxy"),
    "NO_PROXY": (True, "as no_proxy"),
    "ALL_PROXY": (True, "as all_proxy"),
    "SSL_CERT_FILE": (True, "a site's own certificate authority, for TLS to the Hub"),
    "SSL_CERT_DIR": (True, "as SSL_CERT_FILE"),
    "REQUESTS_CA_BUNDLE": (True, "as SSL_CERT_FILE, for requests"),
    "CURL_CA_BUNDLE": (True, "as SSL_CERT_FILE, for curl-based clients"),
    "CUDA_*": (True, "which GPUs (CUDA_VISIBLE_DEVICES) and the toolkit (CUDA_HOME) on this machine"),
    "NCCL_*": (True, "multi-GPU communication tuned to this machine's network"),
    "NVIDIA_*": (True, "the container runtime's GPU devices and driver capabilities"),
    "CUBLAS_WORKSPACE_CONFIG": (True, "deterministic cuBLAS"),
    "HIP_VISIBLE_DEVICES": (True, "which GPUs, on ROCm"),
    "ROCR_VISIBLE_DEVICES": (True, "which GPUs, on ROCm"),
    "TORCH_*": (True, "torch's caches and switches (TORCH_HOME, TORCH_CUDA_ARCH_LIST)"),
    "PYTORCH_*": (True, "torch's allocator and fallbacks (PYTORCH_CUDA_ALLOC_CONF)"),
    "TRITON_*": (True, "triton's kernel cache and switches"),
    "OMP_*": (True, "OpenMP thread counts (OMP_NUM_THREADS)"),
    "MKL_*": (True, "MKL thread counts"),
    "OPENBLAS_NUM_THREADS": (True, "OpenBLAS thread count"),
    "KMP_*": (True, "Intel OpenMP's settings (KMP_DUPLICATE_LIB_OK keeps torch running on macOS)"),
    "TOKENIZERS_PARALLELISM": (True, "tokenizers' threads after a fork"),
    "HF_*": (True, "the Hub's endpoint, caches and offline switches; HF_TOKEN comes as a secret, not from here"),
    "HUGGINGFACE_HUB_CACHE": (True, "the Hub cache's older name"),
    "TRANSFORMERS_*": (True, "transformers' cache, offline switch and verbosity"),
    "XDG_CACHE_HOME": (True, "where the Hub's, torch's and triton's default caches live"),
    "VIRTUAL_ENV": (True, "the Python environment tools the job starts (pip, uv) act on"),
    "CONDA_PREFIX": (True, "the conda environment, where libraries look for CUDA's"),
    "LD_LIBRARY_PATH": (True, "where clusters and conda put CUDA's libraries (the server's own value)"),
    "PIP_INDEX_URL": (True, "the GGUF job fetches llama.cpp's sources with pip, from the site's index"),
    "PIP_EXTRA_INDEX_URL": (True, "as PIP_INDEX_URL"),
    "PIP_TRUSTED_HOST": (True, "as PIP_INDEX_URL"),
    "PIP_CERT": (True, "as PIP_INDEX_URL: the index's certificate authority"),
    "PIP_CONFIG_FILE": (True, "as PIP_INDEX_URL: where pip's settings are"),
    "CC": (True, "the C compiler the user chose: triton's kernels, llama.cpp's build"),
    "CXX": (True, "the C++ compiler the user chose: llama.cpp's build"),
    "PYTHONPATH": (False, "the server's import path: the job would import its modules, not its interpreter's"),
    "PYTHONHOME": (False, "points the job's interpreter at the server's standard library"),
    "LD_PRELOAD": (False, "a library loaded into every process of the job"),
    "TRACKIO_*": (False, "jobtrail decides where a job's trackio run goes (TRACKIO_DIR per attempt)"),
    "ACCELERATE_*": (False, "jobtrail decides how a job is launched; the server's settings would override its plan"),
    "RANK": (False, "set by the launcher for its workers; the server's would make a job a worker of another"),
    "WORLD_SIZE": (False, "as RANK"),
    "MASTER_ADDR": (False, "as RANK"),
    "MASTER_PORT": (False, "as RANK"),
    "SSH_AUTH_SOCK": (False, "the user's SSH agent: a job could sign in anywhere the user can"),
}


def pass_names(raw: str | None) -> tuple[str, ...]:
    """JOBTRAIL_JOB_ENV_PASS's names, checked: plain names, none of jobtrail's own."""
    names = tuple(name.strip() for name in (raw or "").split(",") if name.strip())
    for name in names:
        if not ENV_NAME.fullmatch(name):
            raise InvalidRequestError(
                f"{PASS_ENV} names {name!r}, which is not an environment variable name.",
                fix=f'List plain names, comma-separated: {PASS_ENV}="WANDB_PROJECT,MY_SETTING".',
            )
        if name.upper().startswith(OWN_PREFIX):
            raise InvalidRequestError(
                f"{PASS_ENV} names {name}: jobtrail's own settings and credentials never reach a job.",
                fix=f"Remove {name} from {PASS_ENV}; a job is given the JOBTRAIL_* variables it reads itself.",
            )
    return names


def passed(name: str) -> bool:
    """Whether the server's variable `name` reaches a local job by RULES (JOBTRAIL_JOB_ENV_PASS aside)."""
    if name.upper().startswith(OWN_PREFIX):
        return False
    for rule, (allowed, _why) in RULES.items():
        if name == rule or (rule.endswith("*") and name.startswith(rule[:-1])):
            # A prefix admits settings, never a credential that happens to share it.
            return allowed and (not rule.endswith("*") or not looks_like_credential_name(name))
    return False


def local_env(request: LaunchRequest, server: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a local attempt: the server's allowed variables and `extra` names, then the secrets,
    then jobtrail's own (which no secret may override)."""
    added = set(extra)
    env = {name: value for name, value in server.items() if passed(name) or name in added}
    env.update(request.secrets)
    env.update(request.env)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop(OUTPUT_DIR_ENV, None)  # only what this attempt was given, never a secret's
    if request.output_dir:
        env[OUTPUT_DIR_ENV] = request.output_dir
    return env
