"""Termination reasons by cause: the fatal exception of a log tail, read by type and module. Pure.

Each rule looks at one exception of the last traceback's chain (see `tracebacks`) and, when it
recognises the cause, returns the line that decided. A rule names the cause by the exception's
type, the package it comes from, the frames that raised it and the library's own wording, never
by one job's output: a rule added here must hold for every job that fails that way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes import families, generic, libraries
from jobtrail.outcomes.tracebacks import Progress, RaisedError, last_chain, progress, went_on

OOM = "The job ran out of memory."
HUB_FAILED = "Training finished but pushing the results to the Hub failed."
REFUSED = "The Hub refused access (token or gated repo)."
DEPENDENCY = "A dependency is missing or failed to install."
CONFIG = (
    "A configuration argument was rejected: the installed library does not take it (renamed or removed between "
    "releases) or its value is invalid. Fix the argument, or run the library version the code was written for."
)
DATA = "The data did not have the expected shape."
TRANSIENT = "A transient network or service failure."
PUSH_FAILED = "Pushing to the Hub failed after the training had saved its work; only the push needs repeating."
PUSH_CODE_FAILED = (
    "The push's own code failed (building the model card, staging the files), not the training: the model is kept. "
    "Fix what the message names (often a release of the library that pushes: update it) and repeat only the push."
)
DATASET_MISSING = "The dataset (or one of its files) does not exist, or is not visible to this token."
MEDIA_MISSING = (
    "A media file the data names (an image, an audio clip, a video) is not where the job looks for it: check that the "
    "media folder argument (image_folder, audio_dir...) is the folder the data's paths are relative to, and that the "
    "files are there under the names the data gives (the same split, the same extension)."
)
OFFLINE = "The Hub is switched off (HF_HUB_OFFLINE) but a file had to come from it."
DIVERGED = "The loss became NaN or infinite: the job stopped training (its nan_loss alert says why)."
NOTHING_TRAINABLE = (
    "The gradient was exactly 0 from the first logged step on: the setup trains nothing, so the job stopped "
    "(its nothing_learned alert names what to change)."
)
MISMATCH = (
    "One installed package calls another with arguments its installed release does not take: their versions do not "
    "match (pin the versions the calling package supports, or update it)."
)
# DESIGN.md: an API mismatch is config_error whatever fixed it (the code, or the versions).
API_MISMATCH = (
    "A call does not fit the installed release's API (a framework calling a hook, override or callback with other "
    "arguments than it takes, or reading an attribute the class no longer has): change the code (the override's or "
    "callback's signature) to this release's API, or install the versions the code was written for."
)
NATIVE = "A native library (CUDA runtime, GPU driver or bitsandbytes build) is missing or does not match this machine."

# Each test looks at one exception of the fatal chain and returns the line that decides, or None.
CauseTest = Callable[[RaisedError, Progress], str | None]


@dataclass(frozen=True)
class CauseRule:
    reason: R
    message: str
    test: CauseTest


# A line at least this long may end where a console wrapped it (rich's traceback at its width, a terminal's hard wrap).
_WRAP_WIDTH = 60


def _line(error: RaisedError, pattern: re.Pattern[str]) -> str | None:
    """The message line the pattern finds, or the first of two where a console's wrap cut its words in two (at a space,
    or mid-word): the match must cross the cut, so words a line has on its own are never joined to the next's."""
    if found := next((line for line in error.lines if pattern.search(line)), None):
        return found
    for first, second in zip(error.lines, error.lines[1:], strict=False):
        head = first.rstrip()
        if len(head) < _WRAP_WIDTH:
            continue
        for joined in (f"{head} {second.strip()}", head + second.strip()):
            match = pattern.search(joined)
            if match and match.start() < len(head) < match.end():
                return first
    return None


def _text(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(alternatives), re.IGNORECASE)


_OUT_OF_MEMORY = _text(
    r"out of memory",
    r"DefaultCPUAllocator",
    r"Unable to allocate [\d.]+ ?[KMGTP]i?B",
    r"Cannot allocate memory",
    r"can't allocate memory",
)
_REFUSED = _text(
    r"\b40[13]\b.*(Client Error|Unauthorized|Forbidden)",
    r"Invalid credentials",
    r"Invalid user token",
    r"You don't have the rights",
    r"not in the authorized list",
    r"Token is required",
)
_NOT_FOUND = {
    "RepositoryNotFoundError",
    "RevisionNotFoundError",
    "DatasetNotFoundError",
    "DataFilesNotFoundError",
    "EmptyDatasetError",
}
_DATASET_REF = _text(r"\bdataset\b", r"huggingface\.co/(api/)?datasets/")
# A data item's media file (an image, audio clip or video a row names), and a data file: paths that come from the data.
_MEDIA = r"jpe?g|png|gif|bmp|webp|tiff?|wav|flac|mp3|ogg|m4a|opus|mp4|avi|mov|mkv|webm"
_MEDIA_FILE = re.compile(rf"\.(?i:{_MEDIA})['\"]")
_DATA_FILE = re.compile(rf"\.(?i:jsonl?|csv|tsv|parquet|arrow|npy|npz|{_MEDIA})['\"]")
# Transport failures (DNS, connect, read), rate limits and server errors: worth a retry.
_NETWORK_TYPES = {
    "ConnectionError",
    "ConnectError",
    "ConnectTimeout",
    "ReadTimeout",
    "WriteTimeout",
    "PoolTimeout",
    "Timeout",
    "TimeoutError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "NewConnectionError",
    "NameResolutionError",
    "MaxRetryError",
    "ProxyError",
    "RemoteDisconnected",
    "ProtocolError",
    "ChunkedEncodingError",
    "IncompleteRead",
    "gaierror",
    "timeout",
    "LocalEntryNotFoundError",
    "ConnectionResetError",
    "ConnectionRefusedError",
    "ConnectionAbortedError",
}
_NETWORK = _text(
    r"Temporary failure in name resolution",
    r"Name or service not known",
    r"Failed to resolve",
    r"nodename nor servname",
    r"Failed to establish a new connection",
    r"Connection (reset|refused)",
    r"timed out",
    r"We couldn't connect to",
    r"Couldn't reach",
    r"\b(429|5\d\d)\b.*(Client|Server) Error",
    r"Too Many Requests",
)
_PUSHING = {
    "push_to_hub",
    "upload_folder",
    "upload_file",
    "upload_large_folder",
    "create_commit",
    "preupload_lfs_files",
    "_push_from_checkpoint",
    "create_repo",
}
# The frames of a commit's upload (not create_repo: a repo refused before anything was sent is no failed push).
_COMMITTING = _PUSHING - {"create_repo"}
# The Hub refusing what a commit holds (its model card's metadata, a file it does not accept, a quota), not who sent it
# (401/403), where to (404) or how often (429).
_CONTENT_REFUSED = _text(r"\b(?:400|409|412|413|422) Client Error", r"Payload Too Large")
_NATIVE = _text(
    r"CUDA Setup failed",
    r"libcudart",
    r"cannot open shared object file",
    r"compiled without GPU support",
    r"CUDA driver version is insufficient",
    r"NVIDIA driver on your system is too old",
    r"undefined symbol",
)
_PACKAGES = _text(
    r"No module named", r"Failed to import \S+ because of the following error", r"does not recognize this architecture"
)
_BAD_CALL = _text(
    r"got an unexpected keyword argument",
    r"got multiple values for (keyword )?argument",
    r"missing \d+ required (positional|keyword-only) arguments?",
)
_CONFIG_PACKAGES = ("trl", "transformers", "accelerate")
# A call with the wrong number of arguments (Python raises it in the caller's frame). Not an unexpected or repeated
# keyword: the libraries pass the user's keywords on through **kwargs, so those are most often the user's own.
_WRONG_ARGUMENTS = _text(
    r"\(\) takes (?:from )?\d+ (?:to \d+ )?(?:positional )?arguments? but \d+ (?:were|was) given",
    r"\(\) missing \d+ required (?:positional|keyword-only) arguments?",
)
# An attribute a library class lacks (not None's, not a builtin's: those are a value that is not what was expected).
_MISSING_ATTRIBUTE = re.compile(r"'(?!NoneType')[A-Z]\w*' object has no attribute '\w+'")
# Packages that call the user's own functions (a datasets map function, a DataLoader's collate_fn): a wrong signature
# there is the user's code, not two packages out of step.
_CALLS_USER_CODE = ("datasets", "utils/data", "multiprocess")
# Frames that only pass their caller's arguments on (torch's module call, decorators' wrappers): the call was made
# further out.
_FORWARDERS = re.compile(
    r"(?:^|\.)(?:_call_impl|_wrapped_call_impl|wrapper|wrapped_func|inner_f|_inner_fn|decorate_\w+|__getattr__)$"
)
# Config systems (OmegaConf, Hydra, jsonargparse, yacs and the configs of detectron2, mmcv/mmengine and fvcore built on
# it, gin, ml_collections, draccus, simple_parsing): whatever they raise is a config that does not match the code
# reading it. Told by the type's package or by the frame that raised it, never an outer one: Hydra's frames wrap the
# whole job.
_CONFIG_MODULES = {"omegaconf", "hydra", "jsonargparse", "yacs", "gin", "ml_collections", "draccus", "simple_parsing"}
_CONFIG_CODE = re.compile(
    r"[\\/](?:omegaconf|hydra|jsonargparse|yacs|gin|ml_collections|draccus|simple_parsing)[\\/]"
    r"|[\\/](?:mmengine|mmcv|detectron2)[\\/](?:utils[\\/])?config[\\/.]|[\\/]fvcore[\\/]common[\\/]config\.py"
)
_CONFIG_TYPE = re.compile(
    r"^(?:Config\w*(?:Error|Exception)|MissingMandatoryValue|Interpolation\w*Error|MissingConfigException"
    r"|OverrideParseException)$"
)
# Hydra's instantiate passing on what the class it built raised: the config only carried that failure.
_TARGET_FAILED = _text(r"Error in call to target ")
# Functions that read data rows, by the words their names are made of (`load_dataset`, `read_rows`, `collate_fn`,
# `preprocess_function`, `tokenize_examples`, a dataset's `__getitem__`), not those that load a model, weights, a state
# or a config, or read the command line.
_READS_DATA = re.compile(
    r"(?i)^(?:__getitem__|__next__|_generate_(?:examples|tables))$|collate"
    r"|(?:^|_)(?:load|read|preprocess|tokeni[sz]e|format)(?:_|$)"
    r"|(?:^|_)(?:data|datasets?|csv|tsv|jsonl?|rows?|records?|samples?|examples?|corpus|conversations?|dialog(?:ue)?s?)"
    r"(?:_|$)"
)
_READS_OTHER = re.compile(r"(?i)model|state|checkpoint|ckpt|weight|config|tokenizer|adapter|lora|args|argv|option")
_DATA_TYPES = {
    "JSONDecodeError",
    "DatasetGenerationError",
    "ArrowInvalid",
    "ArrowTypeError",
    "CastError",
    "SchemaInferenceError",
}


def _diverged(error: RaisedError, _: Progress) -> str | None:
    """The job's own stop (scripts/_watch.py), for a log whose termination event was lost."""
    return error.lines[0] if error.name == "TrainingDivergedError" else None


def _nothing_trainable(error: RaisedError, _: Progress) -> str | None:
    """The job's own stop (scripts/_watch.py), for a log whose termination event was lost."""
    return error.lines[0] if error.name == "NothingTrainableError" else None


def _oom(error: RaisedError, _: Progress) -> str | None:
    return error.lines[0] if error.name.endswith("MemoryError") else _line(error, _OUT_OF_MEMORY)


def _refused(error: RaisedError, _: Progress) -> str | None:
    if error.name in ("GatedRepoError", "LocalTokenNotFoundError"):
        return error.lines[0]
    return _line(error, _REFUSED)


def _network(error: RaisedError, _: Progress) -> str | None:
    return error.lines[0] if error.name in _NETWORK_TYPES else _line(error, _NETWORK)


def _push_failed(error: RaisedError, reached: Progress) -> str | None:
    """A refusal once work is saved, any Hub or network failure while the finished model is pushed, or a commit the Hub
    refused for its content, whenever it was sent: the push is what failed, and only the push needs repeating."""
    if reached >= Progress.CHECKPOINT and (line := _refused(error, reached)):
        return line
    if any(frame.function in _COMMITTING for frame in error.frames) and (
        error.name == "BadRequestError" or _line(error, _CONTENT_REFUSED)
    ):
        return error.lines[0]
    if reached is not Progress.FINISHED or not any(frame.function in _PUSHING for frame in error.frames):
        return None
    from_the_hub = error.module == "huggingface_hub" or error.name.endswith("HTTPError")
    return error.lines[0] if from_the_hub else _network(error, reached)


# A hook run once training ends (Lightning's, transformers', Ultralytics' callbacks), in code that uploads: the results
# are made, and what failed is their push, whatever it raised.
_END_HOOK = re.compile(r"(?i)^(?:\w+\.)*(?:on_(?:train|training|fit)_(?:end|finish(?:ed)?)|after_train(?:ing)?)$")
_UPLOADER = re.compile(r"(?i)hub|upload|push|registry")


def _push_at_end(error: RaisedError, _: Progress) -> str | None:
    ending = [frame for frame in error.frames if _END_HOOK.match(frame.function)]
    return error.lines[0] if any(_UPLOADER.search(frame.path) for frame in ending) else None


# The code of a push itself (transformers' and huggingface_hub's, and the trainers' push methods: `push_to_hub`,
# unsloth's `push_to_hub_merged`, a commit's upload, the model card tagged on the way); not `create_repo`, which runs
# when a trainer starts.
_PUSH_CODE = re.compile(
    r"^(?:\w+\.)*(?:\w*push_to_hub\w*|create_and_tag_model_card|create_commit|upload_(?:folder|file|large_folder)"
    r"|preupload_lfs_files|_upload_modified_files|_push_from_checkpoint)$"
)


# A push given a path with nothing there (a folder the job never saved to): the argument, not the push.
_NO_PATH = _text(r"is not a directory", r"does not exist", r"No such file or directory")


def _push_code_failed(error: RaisedError, _: Progress) -> str | None:
    """An exception raised inside a push's own code, that no rule read as the network, a refusal or a missing repo (a
    model card it cannot tag, a file it cannot stage): the model to push exists (a push sends weights already trained
    or saved), so the push is what failed, and what to repeat once its cause is fixed. Not a call of the wrong shape
    into it (an API mismatch), nor a path with nothing there."""
    if not any(_PUSH_CODE.match(frame.function) for frame in error.frames):
        return None
    if error.name in ("FileNotFoundError", "NotADirectoryError") or _line(error, _NO_PATH):
        return None
    return None if _line(error, _BAD_CALL) or _line(error, _WRONG_ARGUMENTS) else error.lines[0]


def _missing(error: RaisedError) -> bool:
    """A repo, revision or data file that is not there (a missing data file raises FileNotFoundError)."""
    if error.name in _NOT_FOUND:
        return True
    return error.name == "FileNotFoundError" and (error.raised_in("datasets") or _line(error, _DATA_FILE) is not None)


def _media_missing(error: RaisedError, _: Progress) -> str | None:
    """A row's media file (an image, a clip) not found: the data names a file the job's media folder does not hold."""
    found = error.name == "FileNotFoundError" and _line(error, _MEDIA_FILE)
    return error.lines[0] if found else None


def _dataset_missing(error: RaisedError, _: Progress) -> str | None:
    about_data = error.name.startswith(("Dataset", "DataFiles", "EmptyDataset", "FileNotFound"))
    if _missing(error) and (about_data or error.raised_in("datasets") or _line(error, _DATASET_REF)):
        return error.lines[0]
    return None


def _model_missing(error: RaisedError, _: Progress) -> str | None:
    return error.lines[0] if _missing(error) else None


def _offline(error: RaisedError, _: Progress) -> str | None:
    return error.lines[0] if error.name == "OfflineModeIsEnabled" else None


def _native(error: RaisedError, _: Progress) -> str | None:
    # A bitsandbytes without its compiled library fails later as `'NoneType' object has no attribute ...`.
    if error.raised_in("bitsandbytes") and error.name in ("AttributeError", "RuntimeError", "OSError"):
        return _line(error, _NATIVE) or error.lines[0]
    return _line(error, _NATIVE)


def _package(error: RaisedError, _: Progress) -> str | None:
    return error.lines[0] if error.name in ("ImportError", "ModuleNotFoundError") else _line(error, _PACKAGES)


def _library_name_error(error: RaisedError, _: Progress) -> str | None:
    """A NameError raised inside an installed package: a library's own code names something it imports only when an
    optional package is installed (`if is_peft_available(): from peft import PeftModel`), so the package is missing
    or of another version. In the user's script it is the user's own typo, which this does not claim."""
    frame = error.frames[-1] if error.frames else None
    return error.lines[0] if error.name == "NameError" and frame is not None and frame.is_library else None


def _packages_out_of_step(error: RaisedError, _: Progress) -> str | None:
    """A call with the wrong number of arguments (TypeError), or a read of an attribute a library class lacks
    (AttributeError), made inside installed packages: one package uses another's API (or calls a hook another overrides)
    as a release it was not written for has it, an API mismatch (DESIGN.md: config_error). The traceback's last frame
    (past the frames that only forward a call) is the caller, since Python checks arguments before the callee runs; in
    the user's script it is the user's code."""
    if error.name == "TypeError":
        line = _line(error, _WRONG_ARGUMENTS)
    elif error.name == "AttributeError":  # a library reads an attribute another's release does not have
        line = _line(error, _MISSING_ATTRIBUTE)
    else:
        return None
    if line is None:
        return None
    callers = [frame for frame in error.frames if not _FORWARDERS.search(frame.function)]
    if not callers:
        return None
    caller = callers[-1]
    if not caller.is_library or any(map(caller.in_package, _CALLS_USER_CODE)):
        return None
    return line


def _rejected_config(error: RaisedError, _: Progress) -> str | None:
    """ValueError/TypeError raised while a TRL/transformers/accelerate config or trainer was built, or by PEFT."""
    if error.name not in ("ValueError", "TypeError"):
        return None
    if error.name == "TypeError" and (line := _line(error, _BAD_CALL)):
        return line
    frame = error.innermost_library_frame
    if frame is None:
        return None
    building = frame.function in ("__init__", "__post_init__") and any(map(frame.in_package, _CONFIG_PACKAGES))
    return error.lines[0] if building or frame.in_package("peft") else None


def _bad_data(error: RaisedError, _: Progress) -> str | None:
    if error.name in _DATA_TYPES:
        return error.lines[0]
    wrong = error.name in ("ValueError", "KeyError", "TypeError") and error.raised_in("datasets")
    return error.lines[0] if wrong or _malformed_row(error) else None


# A TypeError's words for a value of a type the code cannot use there: None (a field left empty), a float (pandas' NaN
# of an empty cell), a list or dict where a string was expected.
_VALUE_TYPE = re.compile(
    r"'NoneType'|\bnot \"(?:NoneType|float|int|list|dict)\"|\bgot (?:NoneType|float|int|list|dict)\b"
    r"|'(?:float|int|list|dict)' (?:and|object)\b|\band '(?:float|int|list|dict|str)'"
)


def _malformed_row(error: RaisedError) -> bool:
    """An IndexError or KeyError raised by the function reading data rows (`row[0]` of a CSV row without the field,
    `example["text"]` of a record without the key), or a TypeError there over a value of the wrong type (a field that
    is None, `query + "\\n"` on an empty cell): the data does not have the shape or types the code reads. A library's
    own `__getitem__` (a ModuleList's, a tokenizer output's) is not reading rows; the datasets library's is."""
    frame = error.frames[-1] if error.frames else None
    of_a_value = error.name == "TypeError" and _line(error, _VALUE_TYPE) is not None
    if (error.name not in ("IndexError", "KeyError") and not of_a_value) or frame is None:
        return False
    name = frame.function
    if name.startswith("__") and frame.is_library and not frame.in_package("datasets"):
        return False
    return _READS_DATA.search(name) is not None and _READS_OTHER.search(name) is None


def _config_mismatch(error: RaisedError, _: Progress) -> str | None:
    """An exception a config system raised (by its type's package or name, or the frame that raised it): the config
    does not match what the code reads."""
    if _line(error, _TARGET_FAILED):
        return None
    raiser = error.frames[-1] if error.frames else None
    by_system = error.module in _CONFIG_MODULES or (raiser is not None and _CONFIG_CODE.search(raiser.path))
    return error.lines[0] if by_system or _CONFIG_TYPE.match(error.name) else None


# Functions that check what they were given: a constructor, a dataclass's post-init, a parser, and a checker by any
# word of its name (`validate_args`, DeepSpeed's `_batch_assertion` and `_do_sanity_check`, `checkArgs`).
_CHECKS_ARGUMENTS = re.compile(
    r"^(?:__init__|__post_init__|parse_args)$"
    r"|(?:^|_)(?:validat(?:e|es|ion|or)|checks?|checker|verify|verification|asserts?|assertions?|sanity)(?=_|[A-Z\d]|$)"
)


def _argument_assertion(error: RaisedError, _: Progress) -> str | None:
    """An assertion that failed in the function checking its arguments (lm-eval's HFLM asserting `pretrained` is a
    name, DeepSpeed checking its config): the caller passed what the code does not accept, a config_error, whatever
    the assertion's words (often none)."""
    frame = error.frames[-1] if error.frames else None
    if error.name != "AssertionError" or frame is None:
        return None
    return error.lines[0] if _CHECKS_ARGUMENTS.search(frame.function) else None


# A program's command-line entry (a `cli` package or module, `__main__.py`, a console script) and its dispatching
# function (`main`, `cli_main`, `run`, `dispatch`): a KeyError raised there is a lookup of what the command line named
# (a subcommand in its routing table, a choice) that the installed program does not have.
_CLI_CODE = re.compile(r"[\\/]cli[\\/]|[\\/](?:cli|commands?|__main__)\.py$|[\\/]bin[\\/][\w.-]+$")
_DISPATCHES = re.compile(r"(?i)^(?:\w+_)?(?:main|cli|run|dispatch|route|entry(?:_?point)?)(?:_\w+)?$")


def _command_unknown(error: RaisedError, _: Progress) -> str | None:
    frame = error.frames[-1] if error.frames else None
    if error.name != "KeyError" or frame is None:
        return None
    return error.lines[0] if _CLI_CODE.search(frame.path) and _DISPATCHES.match(frame.function) else None


def _unknown_model_type(error: RaisedError, _: Progress) -> str | None:
    """transformers' table of model types has no entry for the checkpoint's: the installed release predates it."""
    in_auto = any("configuration_auto" in frame.path for frame in error.frames)
    return error.lines[0] if error.name == "KeyError" and in_auto else None


def _interrupted(error: RaisedError, _: Progress) -> str | None:
    """Ctrl-C (SIGINT) raised in the job itself: someone stopped it. Last of the rules, so that an exception the
    interrupt was handling (or one it caused while saving) is read first."""
    return error.lines[0] if error.name == "KeyboardInterrupt" else None


_INTERRUPTED = CauseRule(
    R.CANCELLED, "The job was interrupted (Ctrl-C, SIGINT): someone stopped it; nothing failed.", _interrupted
)


def _signature(signature: families.Signature) -> CauseRule:
    """A rule from a library's own wording (families), tried on every line of the exception's message."""

    def test(error: RaisedError, _: Progress) -> str | None:
        return _line(error, signature.pattern)

    return CauseRule(signature.reason, signature.message, test)


_DISK, *_LIBRARIES = [_signature(signature) for signature in families.SIGNATURES]


def _refusal(signature: families.Signature) -> CauseRule:
    """A rule from the common words of a library's refusal (generic.REFUSALS), tried on the exception's own line only:
    what a process printed after it is often advice in the same words."""

    def test(error: RaisedError, _: Progress) -> str | None:
        if _DEVICE_ERROR.search(error.lines[0]):
            return None
        return error.lines[0] if signature.pattern.search(error.lines[0]) else None

    return CauseRule(signature.reason, signature.message, test)


# A device runtime's error code ("CUDA error: operation not supported") is the driver or the machine answering, not a
# library refusing its settings, whatever words the code's description uses.
_DEVICE_ERROR = re.compile(r"\b(?:CUDA|cuDNN|cuBLAS|CUBLAS|NCCL|HIP|MPS) error\b")
_REFUSALS = [_refusal(signature) for signature in generic.REFUSALS]

# A table, one rule per cause (rows alike by design), in priority order; the first rule that matches any
# exception of the chain (the fatal one first, then its causes) decides. A gated repo's words (`generic.GATED`, among
# the libraries' sentences) come before not-found (a GatedRepoError is a RepositoryNotFoundError), not-found before a
# bare 401 (the Hub answers 401 for a repo it cannot find), the push after training before both.
# A full disk comes first: its OSError or RuntimeError would otherwise read as whatever was being written. The
# libraries' own sentences come before the rules by type, which they make precise; the common words of a library's
# refusal (a token, a package, a setting) after the rules that read a type or where it was raised.
CAUSE_RULES: list[CauseRule] = [
    _DISK,
    CauseRule(R.DIVERGED, DIVERGED, _diverged),
    CauseRule(R.CONFIG_ERROR, NOTHING_TRAINABLE, _nothing_trainable),
    *_LIBRARIES,
    CauseRule(R.DEPENDENCY_ERROR, DEPENDENCY, _unknown_model_type),
    CauseRule(R.OOM, OOM, _oom),
    CauseRule(R.HUB_ERROR, PUSH_FAILED, _push_failed),
    CauseRule(R.HUB_ERROR, PUSH_FAILED, _push_at_end),
    CauseRule(R.BAD_INPUT, MEDIA_MISSING, _media_missing),
    CauseRule(R.BAD_INPUT, DATASET_MISSING, _dataset_missing),
    CauseRule(R.CONFIG_ERROR, libraries.MODEL_MISSING, _model_missing),
    CauseRule(R.AUTH_ERROR, REFUSED, _refused),
    CauseRule(R.CONFIG_ERROR, OFFLINE, _offline),
    CauseRule(R.INFRA_TRANSIENT, TRANSIENT, _network),
    CauseRule(R.DEPENDENCY_ERROR, NATIVE, _native),
    CauseRule(R.DEPENDENCY_ERROR, DEPENDENCY, _package),
    CauseRule(R.CONFIG_ERROR, API_MISMATCH, _packages_out_of_step),
    CauseRule(R.DEPENDENCY_ERROR, MISMATCH, _library_name_error),
    CauseRule(R.CONFIG_ERROR, generic.CONFIG_KEYS.message, _config_mismatch),
    *_REFUSALS,
    CauseRule(R.CONFIG_ERROR, CONFIG, _rejected_config),
    CauseRule(R.CONFIG_ERROR, CONFIG, _argument_assertion),
    CauseRule(R.CONFIG_ERROR, generic.CLI.message, _command_unknown),
    CauseRule(R.BAD_INPUT, DATA, _bad_data),
    CauseRule(R.HUB_ERROR, PUSH_CODE_FAILED, _push_code_failed),
    _INTERRUPTED,
]


def _line_of_any(chain: list[RaisedError], pattern: re.Pattern[str]) -> bool:
    return any(_line(error, pattern) for error in chain)


def fatal_chain(lines: list[str]) -> list[RaisedError]:
    """The chain of the traceback that ended the job, or [] (none, or training went on after it: handled)."""
    chain = last_chain(lines)
    if not chain:
        return []
    fatal = chain[-1].index
    return [] if went_on(lines[:fatal], lines[fatal + 1 :]) else chain


def find(lines: list[str]) -> tuple[CauseRule, str] | None:
    """The rule that names the cause of the tail's fatal exception, and the log line that decided."""
    chain = fatal_chain(lines)
    return read(chain, lines) if chain else None


def read(chain: list[RaisedError], lines: list[str]) -> tuple[CauseRule, str] | None:
    """The rule that names the cause of a chain of exceptions the lines show, and the log line that decided."""
    reached = progress(lines[: chain[-1].index])
    # torch.save's short write (`unexpected pos`) after the chain ran out of memory writing it: the RAM, not the disk.
    short_of_memory = any(_oom(error, reached) for error in chain)
    for rule in CAUSE_RULES:
        if rule is _DISK and short_of_memory and not _line_of_any(chain, families.DISK_ERRNO):
            continue
        for error in reversed(chain):
            if line := rule.test(error, reached):
                if rule.reason is R.CANCELLED:
                    # Ctrl-C after another process's fatal error (a rank's OOM, then the others hung at a collective
                    # until someone stopped them): that error is why the job ended, the interrupt only its end.
                    return find(lines[: chain[0].index]) or (rule, lines[error.index + error.lines.index(line)])
                return rule, lines[error.index + error.lines.index(line)]  # as logged, prefix and all
    return None
