"""jobtrail job-side runtime: structured events, the checkpoint commit protocol, the dataset
mapping, and how a job ends.

render.py inlines this file into every rendered script (templates import it while they sit next
to it in scripts/), so it must stay standard-library only at import time and free of
`from __future__` imports (those are only legal at the top of a file). Heavy packages are
imported lazily and defensively, so that a missing one shows up as a `dependency_error`
termination event rather than a crash before the first event.

Events are single stdout lines, `JOBTRAIL ` + compact JSON with "event" first; the server
rebuilds the attempt's receipt from logs alone, so every field here is part of a contract.
"""

import contextlib
import gc
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# --- jobtrail:runtime ---
from _disk import disk_full_message, free_bytes, says_out_of_space, written_path

# --- end jobtrail:runtime ---

EVENT_PREFIX = "JOBTRAIL "
MANIFEST_NAME = "jobtrail_manifest.json"
MARKER_NAME = "JOBTRAIL_COMMITTED"
CHECKPOINT_DIR_RE = re.compile(r"^checkpoint-(\d+)$")
PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "tokenizers")
MESSAGE_LIMIT = 500
SIGTERM_EXIT_CODE = 143  # 128 + SIGTERM, what a shell reports for a process killed by it


# --- events ---------------------------------------------------------------------------------


_EMIT_LOCK = threading.Lock()  # the watchdog thread emits too: one whole line at a time


def emit(event: str, **fields: Any) -> None:
    """Print one structured event line and flush at once (logs may be all that survives).

    In a job of many workers only rank 0 speaks: the others train the same steps, and one receipt
    is built from one account of them."""
    if process_rank() != 0:
        return
    line = event_line(event, time.time(), fields)
    with _EMIT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def event_line(event: str, at: float, fields: dict[str, Any]) -> str:
    """The line emit() prints; its time to the millisecond (a log's, a receipt's resolution)."""
    record = {"event": event, "time": round(at, 3), **fields}
    return EVENT_PREFIX + json.dumps(record, separators=(",", ":"), default=str)


def emit_environment() -> dict[str, Any]:
    """Emit the `environment` event: where this attempt runs and with which packages."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "packages": {name: package_version(name) for name in PACKAGES},
        **_torch_facts(),
        "image": os.environ.get("JOBTRAIL_IMAGE"),
        "world_size": world_size(),  # the job's workers; what else this event says is rank 0's view
    }
    emit("environment", **info)
    return info


def package_version(name: str) -> str | None:
    """The installed version of a distribution package; None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch_facts() -> dict[str, Any]:
    """torch/CUDA versions and the device; never raises (a broken torch is reported later)."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - ImportError, or a broken install raising something else at import
        return {"torch": None, "cuda": None, "device": None, "gpu": None}
    gpu = None
    if torch.cuda.is_available():
        gpu = {
            "name": torch.cuda.get_device_name(0),
            "count": torch.cuda.device_count(),
            "bf16": torch.cuda.is_bf16_supported(),
        }
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device": "cuda" if gpu else "cpu", "gpu": gpu}


def job_output_dir(config: dict[str, Any], template: str) -> Path:
    """Where the job writes, created: CONFIG's output_dir, else the directory its backend gives it in
    JOBTRAIL_OUTPUT_DIR (a local job's run directory: the script holds no job id, so a dry run hashes the
    script a submission runs), else outputs/<template> beside a script run by hand."""
    chosen = config.get("output_dir") or os.environ.get("JOBTRAIL_OUTPUT_DIR") or f"outputs/{template}"
    output_dir = Path(chosen).expanduser().resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    _WRITES["output"] = output_dir
    return output_dir


# --- checkpoint commit protocol ---------------------------------------------------------------
# writing   → bytes may exist, readers ignore them (no marker)
# committed → manifest (path, size, sha256 of every file) + marker holding the manifest's sha256
# superseded→ older committed checkpoints beyond retention; the marker goes first, then the bytes
#
# Hashing and fsyncing a checkpoint costs as much as writing it (more, where sha256 is slow), so a training
# job commits in the background (BackgroundCommits): the Trainer writes every byte, training goes on, and a
# thread hashes, fsyncs and writes manifest then marker. Until the marker lands the checkpoint is `writing`
# for every reader, so a job killed while it hashes leaves a directory no resume loads.

HASH_CHUNK = 8 << 20  # bytes per read while hashing: few system calls, and hashlib lets go of the GIL per update
HASH_THREADS = 4  # a checkpoint's files hashed at once (weights, optimizer state ...): sha256 runs on one core


def checkpoint_step(path: Path) -> int | None:
    """N for a directory named checkpoint-N, else None."""
    match = CHECKPOINT_DIR_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def begin_checkpoint(ckpt_dir: Path | str, step: int) -> None:
    """Mark `ckpt_dir` as being written: emit `writing` and drop any stale commit there.

    A directory can be written again (a resumed attempt re-saving a step whose earlier copy was
    corrupt); its old marker must not vouch for the new bytes while they are half written.
    """
    ckpt_dir = Path(ckpt_dir)
    _WRITES["checkpoint"] = ckpt_dir
    if (ckpt_dir / MARKER_NAME).exists():
        (ckpt_dir / MARKER_NAME).unlink()
        _fsync_dir(ckpt_dir)  # the withdrawal must be durable before new bytes land
    with contextlib.suppress(FileNotFoundError):
        (ckpt_dir / MANIFEST_NAME).unlink()
    emit("checkpoint", state="writing", step=step, path=str(ckpt_dir))


def commit_checkpoint(
    ckpt_dir: Path | str, step: int, run_id: str, attempt_id: str, *, written_at: float | None = None
) -> dict[str, Any]:
    """Commit a fully written checkpoint directory: fsync files → manifest → marker (atomic).

    written_at: when training went on (its last byte written, and any earlier commit landed), for a commit that
    ran after it (its event says so: the seconds from `writing` to it are what training waited, the rest ran
    beside training)."""
    ckpt_dir = Path(ckpt_dir)
    paths = _payload_files(ckpt_dir)
    with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="jobtrail-hash") as pool:
        files = list(pool.map(lambda path: _describe_file(ckpt_dir, path), paths))
    manifest = {"version": 1, "step": step, "files": files}
    manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _atomic_write(ckpt_dir / MANIFEST_NAME, manifest_bytes)
    marker = {
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "run_id": run_id,
        "attempt_id": attempt_id,
        "step": step,
        "committed_at": time.time(),
    }
    _atomic_write(ckpt_dir / MARKER_NAME, json.dumps(marker, sort_keys=True).encode())
    total = sum(f["size"] for f in files)
    _WRITES["checkpoint_bytes"] = total
    emit(
        "checkpoint",
        state="committed",
        step=step,
        path=str(ckpt_dir),
        manifest_sha256=marker["manifest_sha256"],
        files=len(files),
        bytes=total,
        **({"written_at": round(written_at, 3)} if written_at is not None else {}),
    )
    return {**marker, "path": str(ckpt_dir), "files": len(files), "bytes": total}


class BackgroundCommits:
    """Checkpoint commits (with whatever follows them: a push, retention) run one at a time in a thread.

    A commit handed over while the previous one still runs waits for it first: commits land in step order,
    at most one checkpoint is read back at a time, and a fast saving schedule slows training down to the pace
    of its commits instead of piling them up. A commit's failure is raised in the training thread, by the next
    submit or wait; run_job waits before the job's termination event, so that event follows every commit."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def submit(self, work: Callable[[], Any]) -> None:
        self.wait()

        def run() -> None:
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 - raised again in the training thread, by wait()
                self.error = exc

        self.thread = threading.Thread(target=run, name="jobtrail-commit", daemon=True)
        self.thread.start()

    def settle(self) -> None:
        """Until the commit under way is done (a SIGTERM still interrupts the wait: Terminated)."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def wait(self) -> None:
        """Until the commit under way is done; raises what it failed with."""
        self.settle()
        if self.error is not None:
            error, self.error = self.error, None
            raise error


COMMITS = BackgroundCommits()  # the job's, one per process


def withdraw_checkpoint(ckpt_dir: Path | str, step: int, why: str) -> None:
    """Take back a commit: the marker goes (durably) and the manifest with it, so no resume ever loads these
    weights; the files stay until retention removes them. Used when the run learns, after the commit, that
    the weights it holds are destroyed (a loss that blew up)."""
    ckpt_dir = Path(ckpt_dir)
    with contextlib.suppress(FileNotFoundError):
        (ckpt_dir / MARKER_NAME).unlink()
    with contextlib.suppress(FileNotFoundError):
        (ckpt_dir / MANIFEST_NAME).unlink()
    _fsync_dir(ckpt_dir)
    emit("checkpoint", state="withdrawn", step=step, path=str(ckpt_dir), why=why)


def verify_checkpoint(ckpt_dir: Path | str, *, deep: bool = True) -> tuple[bool, str]:
    """(True, "ok") when the marker exists and the manifest it names matches every file.

    deep=False checks presence and sizes only (cheap, for retention decisions); resume always
    verifies hashes. Files not in the manifest are ignored: they were not part of the commit.
    """
    ckpt_dir = Path(ckpt_dir)
    marker_path, manifest_path = ckpt_dir / MARKER_NAME, ckpt_dir / MANIFEST_NAME
    if not ckpt_dir.is_dir():
        return False, "directory missing"
    if not marker_path.is_file():
        return False, "no commit marker (partial, or still being written)"
    try:
        marker = json.loads(marker_path.read_text())
        manifest_bytes = manifest_path.read_bytes()
    except FileNotFoundError:
        return False, "marker present but manifest missing"
    except (OSError, ValueError) as exc:
        return False, f"unreadable marker: {exc}"
    if hashlib.sha256(manifest_bytes).hexdigest() != marker.get("manifest_sha256"):
        return False, "manifest does not match the marker's sha256"
    named_step = checkpoint_step(ckpt_dir)
    if named_step is not None and marker.get("step") != named_step:
        # A committed checkpoint copied or renamed by hand: resuming would report the wrong step.
        return False, f"marker says step {marker.get('step')} but the directory is checkpoint-{named_step}"
    problem = verify_manifest(ckpt_dir, manifest_bytes, deep=deep)
    return (False, problem) if problem else (True, "ok")


def verify_manifest(ckpt_dir: Path, manifest_bytes: bytes, *, deep: bool = True) -> str | None:
    """Why the directory's files do not match the manifest; None when every file it lists does."""
    try:
        entries = json.loads(manifest_bytes)["files"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest: {exc}"
    return next((problem for entry in entries if (problem := _check_entry(ckpt_dir, entry, deep=deep))), None)


def find_resume_target(output_dir: Path | str) -> tuple[str | None, int | None, list[dict[str, str]]]:
    """(path, step, skipped): the newest checkpoint-N that verifies; newer failures are reported.

    Only checkpoints newer than the one chosen are examined (and reported), so resuming costs
    one full hash of the chosen checkpoint, not of every checkpoint on disk.
    """
    skipped: list[dict[str, str]] = []
    for step, path in _checkpoints_newest_first(Path(output_dir)):
        ok, why = verify_checkpoint(path)
        if ok:
            return str(path), step, skipped
        skipped.append({"path": str(path), "why": why})
    return None, None, skipped


def apply_retention(output_dir: Path | str, keep: int | None, just_committed: int | None = None) -> list[str]:
    """Delete committed checkpoints beyond the newest `keep`, and dead partial ones.

    The newest committed checkpoint is never deleted (keep < 1 counts as 1). A directory that
    does not verify is removed only when it is older than the newest committed checkpoint: a
    newer one may still be being written, or be evidence worth keeping. Returns removed paths.

    `just_committed` is the step the caller has just committed; directories above it are left
    alone, uncounted: resume rejected them (or they appeared since), and the cheap check cannot
    tell a newer checkpoint corrupted in place (same sizes) from a good one, so counting it as
    the newest commit would delete the real one.
    """
    if keep is None:
        return []
    keep = max(1, int(keep))
    committed: list[tuple[int, Path]] = []
    broken: list[tuple[int, Path, str]] = []
    for step, path in _checkpoints_newest_first(Path(output_dir)):
        if just_committed is not None and step > just_committed:
            continue
        ok, why = verify_checkpoint(path, deep=False)
        if ok:
            committed.append((step, path))
        else:
            broken.append((step, path, why))
    if not committed:
        return []
    newest_step = committed[0][0]
    removed: list[str] = []
    for step, path in committed[keep:]:
        _remove_checkpoint(path)
        emit("checkpoint", state="superseded", step=step, path=str(path))
        removed.append(str(path))
    for step, path, why in broken:
        if step < newest_step:
            _remove_checkpoint(path)
            emit("checkpoint", state="discarded", step=step, path=str(path), why=why)
            removed.append(str(path))
    return removed


def _checkpoints_newest_first(output_dir: Path) -> list[tuple[int, Path]]:
    """The checkpoint-N directories directly inside output_dir; a symlink is never one (retention
    deletes checkpoints, and must never reach through a link to files outside the job's output)."""
    if not output_dir.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in output_dir.iterdir() if p.is_dir() and not p.is_symlink()]
    return sorted(((s, p) for s, p in found if s is not None), reverse=True)


def _payload_files(ckpt_dir: Path) -> list[Path]:
    """Every file of the checkpoint except the protocol's own (and their temp files)."""
    own = (MANIFEST_NAME, MARKER_NAME)
    return sorted(
        p
        for p in ckpt_dir.rglob("*")
        if p.is_file() and not any(p.name == n or p.name.startswith(f".{n}.") for n in own)
    )


def _describe_file(root: Path, path: Path) -> dict[str, Any]:
    """Manifest entry; fsyncs the file while hashing so the marker never outruns the bytes."""
    with path.open("rb", buffering=0) as f:
        digest = _sha256_of(f)
        os.fsync(f.fileno())
        size = os.fstat(f.fileno()).st_size
    return {"path": path.relative_to(root).as_posix(), "size": size, "sha256": digest}


def _check_entry(root: Path, entry: dict[str, Any], *, deep: bool) -> str | None:
    path = root / entry["path"]
    if not path.is_file():
        return f"file {entry['path']} missing"
    if path.stat().st_size != entry["size"]:
        return f"file {entry['path']} has size {path.stat().st_size}, manifest says {entry['size']}"
    if deep and sha256_file(path) != entry["sha256"]:
        return f"file {entry['path']} sha256 mismatch"
    return None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    with path.open("rb", buffering=0) as f:
        return _sha256_of(f)


def _sha256_of(f: Any) -> str:
    """Hex sha256 of an open file, read into one reused buffer (no new bytes object per chunk)."""
    digest, buffer = hashlib.sha256(), bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    while read := f.readinto(buffer):
        digest.update(view[:read])
    return digest.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same directory → fsync → rename → fsync the directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_checkpoint(path: Path) -> None:
    """Marker first, so a deletion cut short never leaves a 'committed' half directory."""
    with contextlib.suppress(FileNotFoundError):
        (path / MARKER_NAME).unlink()
        _fsync_dir(path)
    shutil.rmtree(path, ignore_errors=True)


# --- checkpoints on the Hub (remote backends) ---------------------------------------------------
# A remote job's disk disappears with it, so each committed checkpoint is pushed to the output
# repo's REMOTE_CHECKPOINT folder. A Hub commit is atomic, so files, manifest and marker go in ONE
# commit that also deletes the previous checkpoint's files: readers see the old committed
# checkpoint or the new one, never a folder without its marker. (Two commits, files then marker,
# would leave the Hub with no committed checkpoint between them: a job cancelled or preempted
# there would lose everything it had trained.)
REMOTE_CHECKPOINT = "last-checkpoint"


def push_checkpoint(ckpt_dir: Path | str, repo_id: str, step: int) -> None:
    from huggingface_hub import HfApi

    ckpt_dir = Path(ckpt_dir)
    commit = HfApi().upload_folder(
        folder_path=str(ckpt_dir),
        path_in_repo=REMOTE_CHECKPOINT,
        repo_id=repo_id,
        delete_patterns=["*"],  # files of the previous checkpoint that this one does not replace
        commit_message=f"jobtrail: checkpoint {step} committed",
    )
    # The commit stays readable once a later checkpoint replaces this one: an evaluation of it reads that commit.
    emit("checkpoint", state="pushed", step=step, path=str(ckpt_dir), repo=repo_id, revision=commit.oid)


def push_final(final_dir: Path | str, repo_id: str) -> None:
    """The final model at the repo's root, where from_pretrained(repo_id) finds it."""
    from huggingface_hub import HfApi

    HfApi().upload_folder(
        folder_path=str(final_dir),
        repo_id=repo_id,
        ignore_patterns=[MARKER_NAME],
        commit_message="jobtrail: final model",
    )
    emit("artifact", kind="pushed_model", path=str(final_dir), repo=repo_id)


def fetch_remote_checkpoint(repo_id: str, output_dir: Path | str) -> str | None:
    """Bring the Hub's committed checkpoint to a fresh machine, if it verifies; its path or None."""
    from huggingface_hub import list_repo_files, snapshot_download

    if f"{REMOTE_CHECKPOINT}/{MARKER_NAME}" not in set(list_repo_files(repo_id)):
        return None
    staging = Path(output_dir) / ".remote-checkpoint"
    snapshot_download(repo_id, allow_patterns=[f"{REMOTE_CHECKPOINT}/*"], local_dir=str(staging))
    fetched = staging / REMOTE_CHECKPOINT
    ok, why = verify_checkpoint(fetched)
    marker = json.loads((fetched / MARKER_NAME).read_text()) if ok else {}
    if not ok or not isinstance(marker.get("step"), int):
        emit("checkpoint", state="discarded", path=f"{repo_id}/{REMOTE_CHECKPOINT}", why=why or "marker has no step")
        return None
    target = Path(output_dir) / f"checkpoint-{marker['step']}"
    if not target.exists():
        os.replace(fetched, target)
    shutil.rmtree(staging, ignore_errors=True)
    return str(target)


# --- phases and failure classification --------------------------------------------------------
# A job tags what it was doing when it failed (`with phase("data"): ...`), because the same
# exception type means different things in different places: a ValueError while loading data is
# bad input, while building the trainer's config it is a config error.
#
# What the job is doing is also announced, as a `phase` event, so that the seconds or minutes
# before the first step (loading the model, tokenizing) and after the last (saving, pushing) are
# not silence: {"event": "phase", "phase": "training", ...}. The names an agent sees are
# PHASES; a tag names where an exception came from and may announce one of them, or none.

PHASES = (
    "installing",  # building a tool the job needs (llama.cpp); before any event, the server's own phase
    "loading_model",
    "tokenizing",  # loading, mapping and tokenizing the data
    "training",
    "evaluating",
    "saving",
    "pushing",
    "converting",  # convert_gguf: the model to an F16 GGUF file
    "quantizing",  # convert_gguf: the F16 file to the smaller types
)
_PHASE_ATTR = "_jobtrail_phase"
_ANNOUNCED: dict[str, str | None] = {"phase": None}  # the last phase announced (one job per process)


def announce_phase(name: str, **fields: Any) -> None:
    """Emit a `phase` event when the job enters phase `name` (one of PHASES); a repeat of the current
    phase is emitted only when it brings fields (the trainer's max_steps once training starts)."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; use one of {PHASES}")
    if name == _ANNOUNCED["phase"] and not fields:
        return
    _ANNOUNCED["phase"] = name
    emit("phase", phase=name, **fields)


@contextlib.contextmanager
def phase(name: str, announce: str | None = None) -> Iterator[None]:
    """Tag any exception escaping the block with the phase it came from (innermost wins); with
    `announce`, first tell the log that the job enters that phase (announce_phase)."""
    if announce:
        announce_phase(announce)
    try:
        yield
    except BaseException as exc:
        if getattr(exc, _PHASE_ATTR, None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _PHASE_ATTR, name)
        raise


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes/contexts, outermost first (cycle-safe)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        implicit = None if current.__suppress_context__ else current.__context__
        current = current.__cause__ if current.__cause__ is not None else implicit
    return seen


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


_AUTH_RE = re.compile(r"\b(401|403)\b|unauthori[sz]ed|forbidden|gated repo|is gated|access to .* is restricted", re.I)
_TRANSIENT_RE = re.compile(r"\b(500|502|503|504)\b|connection (reset|refused|aborted)", re.I)
_DATA_RE = re.compile(r"\bcolumns?\b|\bdataset\b|\brows?\b|\bjson\b", re.I)
_DATA_ERRORS = {"JSONDecodeError", "DatasetGenerationError", "ArrowInvalid", "DatasetNotFoundError"}
_NETWORK_ERRORS = {"ConnectionError", "ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutError"}


def _is_http(e: BaseException) -> bool:
    return "HTTPError" in _names(e) or "HfHubHTTPError" in _names(e)


# (reason, test(exception, phase)) in priority order; the first rule matching any exception in
# the chain wins. To teach the runtime a new failure, add a row.
FAILURE_RULES: list[tuple[str, Callable[[BaseException, str | None], bool]]] = [
    # The job stopped itself: its loss was lost (the nan_loss alert said why and what to change).
    ("diverged", lambda e, p: "TrainingDivergedError" in _names(e)),  # _watch.py's
    # The job stopped itself: no gradient from its first step on, so its setup trains nothing (its nothing_learned
    # alert names what to change).
    ("config_error", lambda e, p: "NothingTrainableError" in _names(e)),  # _watch.py's
    (
        "oom",
        lambda e, p: isinstance(e, MemoryError) or "OutOfMemoryError" in _names(e) or "out of memory" in str(e).lower(),
    ),
    # Before the data and config rules: a full disk while datasets fills its cache is no data problem.
    ("disk_full", lambda e, p: _out_of_space(e)),
    # Training is done when pushing fails, whatever the cause (a 403 included): only the push
    # needs repeating, so this comes before auth_error.
    ("hub_error", lambda e, p: p == "push"),
    (
        "auth_error",
        lambda e, p: (
            "GatedRepoError" in _names(e)
            or ((isinstance(e, OSError | ValueError) or _is_http(e)) and bool(_AUTH_RE.search(str(e))))
        ),
    ),
    ("dependency_error", lambda e, p: isinstance(e, ImportError)),
    # PEFT found no module to adapt (lora_target_modules names none of the model's): a setting, whatever the phase.
    ("config_error", lambda e, p: "NoMatchingPeftModuleError" in _names(e)),
    # HF_HUB_OFFLINE=1 with a Hub id: retrying cannot help (it is a ConnectionError subclass).
    ("config_error", lambda e, p: "OfflineModeIsEnabled" in _names(e)),
    (
        "infra_transient",
        lambda e, p: bool(_names(e) & _NETWORK_ERRORS) or (_is_http(e) and bool(_TRANSIENT_RE.search(str(e)))),
    ),
    # A user's GRPO reward function failing is a bug in code the job was given: the same config
    # would fail the same way, so it is no data problem and nothing a retry can fix.
    ("config_error", lambda e, p: p == "reward"),
    ("bad_input", lambda e, p: bool(_names(e) & _DATA_ERRORS)),
    ("bad_input", lambda e, p: p == "data" and isinstance(e, ValueError | KeyError | OSError | TypeError)),
    ("config_error", lambda e, p: isinstance(e, TypeError) and "unexpected keyword argument" in str(e)),
    (
        "config_error",
        lambda e, p: p in ("config", "model") and isinstance(e, ValueError | TypeError | KeyError | OSError),
    ),
    ("bad_input", lambda e, p: isinstance(e, KeyError | ValueError) and bool(_DATA_RE.search(str(e)))),
]


def classify_exception(exc: BaseException) -> str:
    """A termination reason for `exc` (see references/jobs.md 'Termination reasons')."""
    current_phase = _phase_of(exc)
    for reason, test in FAILURE_RULES:
        if any(test(e, current_phase) for e in _chain(exc)):
            return reason
    return "unknown"


def _phase_of(exc: BaseException) -> str | None:  # the phase it (or one it was raised from) was raised in
    return next((getattr(e, _PHASE_ATTR) for e in _chain(exc) if getattr(e, _PHASE_ATTR, None)), None)


def describe_exception(exc: BaseException) -> str:
    """One line, at most MESSAGE_LIMIT chars: 'Type: message', plus the root cause if different."""
    root = _chain(exc)[-1]
    text = f"{type(exc).__name__}: {exc}"
    if root is not exc:
        text += f" <- caused by {type(root).__name__}: {root}"
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


# --- a full disk ------------------------------------------------------------------------------
# Where the job writes, as it goes, for a failure for want of space to name (_disk.py says the rest).
_WRITES: dict[str, Any] = {"output": None, "checkpoint": None, "checkpoint_bytes": None}
NEARLY_FULL_BYTES = 64 << 20  # a short write where less than this is free is a full disk's


def _out_of_space(exc: BaseException) -> bool:
    said = says_out_of_space(exc)
    free = free_bytes(_written_path(exc)) if said is None else None
    return bool(said) or (free is not None and free < NEARLY_FULL_BYTES)


def _written_path(exc: BaseException) -> Path | None:
    return written_path(_chain(exc), _phase_of(exc), _WRITES["checkpoint"] or _WRITES["output"])


def disk_full_facts(exc: BaseException) -> dict[str, Any]:
    """The termination event's fields for a full disk: message, path, free_bytes, needed_bytes (None: not known)."""
    path = _written_path(exc)
    free, needed = free_bytes(path), _WRITES["checkpoint_bytes"]
    message = disk_full_message(path, free, needed, describe_exception(exc))[:MESSAGE_LIMIT]
    return {"message": message, "path": str(path) if path else None, "free_bytes": free, "needed_bytes": needed}


# --- how a job ends ----------------------------------------------------------------------------


class Terminated(SystemExit):
    """Raised by the SIGTERM handler; run_job lets it through without a termination event."""


def _on_sigterm(signum: int, frame: Any) -> None:
    # Once is enough: a launcher forwards the signal its workers already got from the supervisor,
    # and a second Terminated raised inside the first one's unwinding would only cut it short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    emit("signal", signal=signum)
    raise Terminated(SIGTERM_EXIT_CODE)


def install_signal_handlers() -> None:
    """SIGTERM stops training by raising in the main thread (the server decides what it meant)."""
    signal.signal(signal.SIGTERM, _on_sigterm)


# A job imports a few hundred thousand objects (torch, transformers, TRL, datasets) that live as long
# as it does, and Python's full collection walks every one: several times while they are imported and
# once more when the interpreter exits, about 2.5 s of a tiny CPU job's 7 (measured: 8.3 s -> 5.3 s).
# So full collections wait while the job sets up (the young generations still collect as usual), and
# what is alive once it is set up, and at its end, is frozen: left out of every later walk.
_GC_THRESHOLD = gc.get_threshold()
_SETUP_FULL_COLLECTION_EVERY = 1000  # young collections between two full ones while setting up (Python: 10)


def setup_done() -> None:
    """The job is set up (imports, data, model): collect once, freeze what is alive, collect as usual again."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLD)


def run_job(main: Callable[[], Any], launcher: dict[str, Any] | None = None) -> None:
    """Run `main` so that every ending leaves one `termination` event (or a `signal` event).

    `launcher` is CONFIG["launcher"]: with more than one process this process becomes the
    launcher of the job's workers (launch_workers), each of which runs this script and so `main`."""
    young, middle, _ = _GC_THRESHOLD
    gc.set_threshold(young, middle, _SETUP_FULL_COLLECTION_EVERY)  # until setup_done
    try:
        _run_main(main, launcher)
    finally:
        gc.freeze()  # the interpreter's teardown then frees the job's objects without walking them again


def _run_main(main: Callable[[], Any], launcher: dict[str, Any] | None) -> None:
    if (launcher or {}).get("num_processes", 1) > 1 and not is_worker():
        launch_workers(int(launcher["num_processes"]))  # type: ignore[index]  # checked just above
    if launcher and not is_worker():
        one_gpu()
    install_signal_handlers()
    try:
        try:
            main()
        finally:
            # A checkpoint whose bytes are all written is committed before the job says how it ended, whatever
            # the ending: a retry resumes from it (a kill while it hashes leaves it unmarked: never loaded).
            COMMITS.settle()
        COMMITS.wait()  # what a commit failed with, where training itself did not fail first, is the job's failure
    except Terminated:
        raise  # the signal event is out; cancelled vs preempted is the server's call
    except KeyboardInterrupt:
        emit("signal", signal=int(signal.SIGINT))
        raise SystemExit(130) from None
    except SystemExit as exc:
        if exc.code in (0, None):
            emit("termination", reason="succeeded")
            raise
        _fail(exc)
    except BaseException as exc:  # noqa: BLE001 - every other ending is a failure the event must name
        _fail(exc)
    else:
        emit("termination", reason="succeeded")


def _fail(exc: BaseException) -> None:
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()
    ending = {"reason": classify_exception(exc), "message": describe_exception(exc), "error_type": type(exc).__name__}
    if ending["reason"] == "disk_full":
        ending.update(disk_full_facts(exc))
    lost_peer = is_worker() and world_size() > 1 and _lost_a_peer(exc)
    if not lost_peer:
        emit("termination", **ending)  # rank 0's; the others' reach the log through their launcher
    _leave_ending(ending, reported=process_rank() == 0 and not lost_peer, lost_peer=lost_peer)
    raise SystemExit(1)


# --- many workers: one process per GPU --------------------------------------------------------
# A job whose CONFIG["launcher"] asks for N > 1 processes starts as one process, the launcher,
# which runs torch's elastic launcher (torch.distributed.run, what `torchrun` runs) as a library on
# its own script: the same command starts the job locally (`python script.py`) and on HF Jobs
# (`uv run script.py`). With --run-path the workers are multiprocessing children running the script
# with runpy, so they stay in the launcher's process group: the local supervisor's signals (cancel,
# timeout) reach every one of them and nothing can outlive the attempt. Each worker is told its RANK
# and WORLD_SIZE; the Trainer (accelerate) joins them over gloo on CPU and NCCL on GPUs.
#
# Rank 0 emits the job's events (emit). A worker that fails leaves its ending in the launcher's
# folder (JOBTRAIL_WORKER_ENDINGS); when torch's launcher reports the workers failed, the launcher
# emits the termination event that rank 0 could not: another rank's error, or a worker killed by a
# signal (torch's launcher then stops the others). That event is the only one the launcher emits.

WORKER_ENDINGS_ENV = "JOBTRAIL_WORKER_ENDINGS"
# Signals that take a process away from outside (the server reads a job killed by one, without sign
# of running out of memory, as preempted); a worker ended by SIGTERM exits 143 through run_job.
_TAKEN_AWAY = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# What a collective says when the worker at the other end died (gloo, NCCL, the c10d store).
_LOST_PEER_RE = re.compile(
    r"connection (reset|closed) by peer|remote process exited|broken pipe|communicator was aborted|"
    r"remote worker|socket timeout",
    re.I,
)


def is_worker() -> bool:
    """Whether torch's elastic launcher started this process (it names every worker's run)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def process_rank() -> int:
    """This process's rank among the job's workers; 0 for a job of one process (and its launcher)."""
    return int(os.environ.get("RANK") or 0) if is_worker() else 0


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE") or 1) if is_worker() else 1


def barrier() -> None:
    """Wait until every worker gets here; nothing to wait for in a job of one process."""
    if world_size() <= 1:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def one_gpu() -> None:
    """A job of one process trains on one GPU: the Trainer would spread it over every visible GPU with
    DataParallel, which is neither the launcher preflight chose nor what the estimate counted."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "0" if visible is None else visible.split(",")[0]


def launch_workers(num_processes: int) -> None:
    """Run this script as `num_processes` workers under torch's elastic launcher; never returns.

    Exits 0 when every worker succeeded, 128 + N when a signal N stopped this launcher (a cancel
    or a timeout: its workers got it too), otherwise 1 (or 128 + N for a worker killed by signal N)
    after the termination event rank 0 could not emit (worker_failure)."""
    endings = Path(tempfile.mkdtemp(prefix="jobtrail-workers-"))
    os.environ[WORKER_ENDINGS_ENV] = str(endings)
    try:
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.run import parse_args, run
    except BaseException as exc:  # noqa: BLE001 - torch missing or broken: nobody else can say so
        shutil.rmtree(endings, ignore_errors=True)
        _fail(exc)
    script = os.path.abspath(sys.argv[0])
    argv = ["--standalone", "--nnodes=1", f"--nproc-per-node={num_processes}", "--run-path", script]
    try:
        run(parse_args(argv))
    except SignalException as exc:
        raise SystemExit(128 + int(exc.sigval)) from None
    except ChildFailedError as exc:
        ending, code = worker_failure(exc.failures, _read_endings(endings))
        if ending:
            emit("termination", **ending)
        print(f"jobtrail launcher: workers failed: {ending or 'rank 0 said why'}", file=sys.stderr, flush=True)
        raise SystemExit(code) from None
    finally:
        shutil.rmtree(endings, ignore_errors=True)
    raise SystemExit(0)


def worker_failure(failures: dict[int, Any], endings: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, int]:
    """(the termination event rank 0 could not emit, or None when it did; the launcher's exit code).

    `failures`: torch's, by rank (local_rank, pid, exitcode: -N for a death by signal N);
    `endings`: what failed workers left (_leave_ending). The first real failure wins: a worker's own
    error (rank 0 already reported its own), else a worker killed by a signal; a worker that only
    lost its peer says nothing about why."""
    errors = sorted((e for e in endings if not e.get("lost_peer")), key=lambda e: e["time"])
    if errors:
        first = errors[0]
        if first.get("reported"):
            return None, 1
        fields = {k: first[k] for k in ("reason", "message", "error_type")}
        return {**fields, "message": f"worker rank {first['rank']}: {first['message']}", "rank": first["rank"]}, 1
    killed = [(rank, f) for rank, f in sorted(failures.items()) if f.exitcode < 0 or 128 < f.exitcode < 160]
    if killed:
        rank, failure = killed[0]
        signum = -failure.exitcode if failure.exitcode < 0 else failure.exitcode - 128
        name = _signal_name(signum)
        return {
            "reason": "preempted" if signum in _TAKEN_AWAY else "unknown",
            "message": f"worker rank {rank} (pid {failure.pid}) was stopped by {name}, which the job did not send; "
            "torch's launcher stopped the other workers",
            "signal": signum,
            "rank": rank,
        }, 128 + signum
    rank, failure = min(failures.items())
    return {
        "reason": "unknown",
        "message": f"worker rank {rank} (pid {failure.pid}) exited with code {failure.exitcode} without saying why",
        "rank": rank,
    }, 1


def _leave_ending(ending: dict[str, Any], *, reported: bool, lost_peer: bool) -> None:
    """Tell the launcher how this worker ended (nothing to do without one)."""
    folder = os.environ.get(WORKER_ENDINGS_ENV)
    if not folder or not is_worker():
        return
    record = {**ending, "rank": process_rank(), "time": time.time(), "reported": reported, "lost_peer": lost_peer}
    with contextlib.suppress(OSError):  # the launcher is gone: nobody to tell
        _atomic_write(Path(folder) / f"rank-{process_rank()}.json", json.dumps(record).encode())


def _read_endings(folder: Path) -> list[dict[str, Any]]:
    endings = []
    for path in folder.glob("rank-*.json"):
        with contextlib.suppress(OSError, ValueError):
            endings.append(json.loads(path.read_text()))
    return endings


def _lost_a_peer(exc: BaseException) -> bool:
    """Whether `exc` is a collective failing because another worker died (its launcher says why)."""
    collective = {"DistBackendError", "DistNetworkError", "RuntimeError"}
    return any(bool(_names(e) & collective) and bool(_LOST_PEER_RE.search(str(e))) for e in _chain(exc))


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
