"""Fault bench (issue 28 item 6): inject the faults a server meets, then print what was injected and what was kept.

    python bench/faults.py [--only output_full home_full damaged_ledger killed_launch] [--workdir DIR]

  output_full     a real SFT job's next checkpoint file is /dev/full, whose writes fail with the kernel's ENOSPC (no
                  root needed); then the space "comes back" (the link goes) and the job is retried
  home_full       JOBTRAIL_HOME on a 64 MB tmpfs, filled to the last byte while a job trains: run in a mount
                  namespace of its own (`unshare -rm`: a user namespace, no root); where the machine allows none,
                  the bench says so and runs the others
  damaged_ledger  4 KiB of random bytes over a page of a ledger holding 20 jobs: serve, export, import
  killed_launch   the server dies (os._exit) right after launching a job and before recording it

Each fault prints `injected:` lines and `kept:` lines; the last line says whether everything that should be kept
was. Exit 1 when something was not. Jobs are real (TRL on the offline tiny model, a few seconds each).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobtrail.app import build_service
from jobtrail.demo.tinymodel import build_tiny_model, write_chat_dataset
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec, TerminationReason

FAULTS = ("output_full", "home_full", "damaged_ledger", "killed_launch")
HYPER = {"max_steps": 8, "logging_steps": 1, "save_steps": 2, "per_device_train_batch_size": 2, "max_length": 64}
JOB_WAIT_S = 300
TMPFS_MB = 64
Check = tuple[str, bool]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=FAULTS, default=list(FAULTS))
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temporary directory)")
    parser.add_argument("--home-on-tmpfs", type=Path, help=argparse.SUPPRESS)  # the re-run inside unshare
    args = parser.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="jobtrail-faults-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    _prepare(root)
    checks: list[Check] = []
    for fault in args.only:
        print(f"== {fault}")
        if fault == "home_full" and args.home_on_tmpfs is None:
            checks += _in_namespace(root)
            continue
        run: Callable[[Path], list[Check]] = {
            "output_full": _output_full,
            "home_full": lambda r: _home_full(r, args.home_on_tmpfs),
            "damaged_ledger": _damaged_ledger,
            "killed_launch": _killed_launch,
        }[fault]
        try:
            checks += run(root)
        except TimeoutError as exc:
            checks.append(kept(f"{fault} ran to its end ({exc})", False))
    lost = [what for what, kept in checks if not kept]
    print(f"== {len(checks) - len(lost)} of {len(checks)} kept" + (f"; NOT kept: {'; '.join(lost)}" if lost else ""))
    return 1 if lost else 0


def _prepare(root: Path) -> None:
    """The tiny model and data (built once per workdir), and this process's environment for every server."""
    os.environ.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(root / "hf-home"),
        TRACKIO_DIR=str(root / "trackio"),
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        JOBTRAIL_DATA_ROOTS=str(root),
    )
    os.environ.pop("JOBTRAIL_LEDGER_URL", None)
    if not (root / "model" / "config.json").exists():
        build_tiny_model(root / "model")
    if not (root / "chat.jsonl").exists():
        write_chat_dataset(root / "chat.jsonl")


def _spec(root: Path, **hyper: object) -> JobSpec:
    return JobSpec(
        method="sft", model=str(root / "model"), dataset=str(root / "chat.jsonl"), hyperparameters={**HYPER, **hyper}
    )


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return found


def _ended(service: Any, job_id: str, attempts: int = 1) -> Any:
    def done() -> Any:
        shown = service.inspect(job_id)
        return shown if shown.status in ("succeeded", "failed", "cancelled") and len(shown.attempts) >= attempts else 0

    return _until(done, JOB_WAIT_S, f"{job_id} to end")


def kept(what: str, ok: bool) -> Check:
    print(f"  kept{'' if ok else ' NOT'}: {what}")
    return what, ok


def _output_full(root: Path) -> list[Check]:
    home = root / "output_full"
    service = build_service(home)
    job_id = service.submit(_spec(root)).job_id
    blocked = home / "runs" / job_id / "output" / "checkpoint-4"
    blocked.mkdir(parents=True)
    (blocked / "trainer_state.json").symlink_to("/dev/full")
    print(f"  injected: {blocked / 'trainer_state.json'} -> /dev/full (ENOSPC on its first write, at step 4)")
    ended = _ended(service, job_id)
    checks = [
        kept(
            f"the reason: {ended.termination_reason} ({ended.termination_message})",
            ended.termination_reason == "disk_full",
        )
    ]
    committed = [c.step for c in service.ledger.committed_checkpoints(job_id)]
    checks.append(kept(f"the committed checkpoints: steps {committed}", committed == [2]))
    (blocked / "trainer_state.json").unlink()
    print("  injected: the space back (the link removed)")
    retried = service.retry(job_id)
    checks.append(kept(f"a retry: {retried.message} from {retried.resume_from}", retried.retried))
    done = _ended(service, job_id, attempts=2)
    checks.append(kept(f"the retry's end: {done.status}", done.status == "succeeded"))
    return checks


def _in_namespace(root: Path) -> list[Check]:
    """home_full, re-run in a mount namespace of its own with a tmpfs for JOBTRAIL_HOME."""
    mount = root / "home_full"
    mount.mkdir(exist_ok=True)
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        print("  not run: no mount namespace here (`unshare -rm` unavailable), so no small filesystem without root")
        return []
    inner = f"mount -t tmpfs -o size={TMPFS_MB}m tmpfs {mount} && exec {sys.executable} {__file__}"
    inner += f" --only home_full --workdir {root} --home-on-tmpfs {mount}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", inner], capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if not line.startswith("==")]
    print("\n".join(lines))
    if done.returncode not in (0, 1) or not lines:
        print(f"  the run in its namespace failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
        return [("home_full's run", False)]
    return [(line.split("kept NOT: ", 1)[1], False) for line in lines if "kept NOT: " in line] + [
        (line.split("kept: ", 1)[1], True) for line in lines if "  kept: " in line
    ]


def _home_full(root: Path, home: Path) -> list[Check]:
    service = build_service(home)
    job_id = service.submit(_spec(root, max_steps=400, save_steps=4)).job_id
    _until(lambda: service.inspect(job_id).last_committed_checkpoint, JOB_WAIT_S, "a committed checkpoint")
    filler = home / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
        except OSError as exc:
            step = service.inspect(job_id).progress.step
            print(f"  injected: {home} filled to its last byte ({exc.strerror}) at step {step}")
    answered = []
    for name, call in (
        ("ps", service.ps),
        ("inspect", lambda: service.inspect(job_id)),
        ("logs", lambda: service.logs(job_id)),
    ):
        try:
            said = call()
            answered.append(name)
            note = getattr(said, "note", None) or next(iter(getattr(said, "warnings", [])), {}).get("message")
            print(f"  {name} answered{f': {note[:150]}' if note else ''}")
        except Exception as exc:  # noqa: BLE001 - what a read tool does on a full home is the finding
            print(f"  {name} failed: {type(exc).__name__}: {exc}")
    checks = [kept(f"read tools answering on the full home: {', '.join(answered)}", len(answered) == 3)]
    ended = _ended(service, job_id)
    checks.append(
        kept(
            f"the reason: {ended.termination_reason} ({ended.termination_message})",
            ended.termination_reason == "disk_full",
        )
    )
    workdir = home / "runs" / job_id / "attempt-1"
    checks.append(kept("exit.json written by the supervisor", (workdir / "exit.json").exists()))
    committed = [c.step for c in service.ledger.committed_checkpoints(job_id)]
    checks.append(kept(f"the committed checkpoints: steps {committed}", bool(committed)))
    filler.unlink()
    print("  injected: the space back (the filler removed)")
    retried = service.retry(job_id)
    checks.append(kept(f"a retry: {retried.message} from {retried.resume_from}", retried.retried))
    service.cancel(job_id)  # the point is made: 400 steps are not
    _ended(service, job_id, attempts=2)
    return checks


def _damaged_ledger(root: Path) -> list[Check]:
    home = root / "damaged_ledger"
    ledger_path = home / "ledger.sqlite"
    ledger = Ledger(ledger_path)
    draw = random.Random(0)
    from support.records import add_ended_run  # the tests' helpers: ended runs written straight into a ledger

    for n in range(20):
        add_ended_run(ledger, f"jt-bench{n:03d}", TerminationReason.SUCCEEDED)
        for pack in range(3):
            event = {"event": "step", "time": 1.0 + pack, "step": pack + 1, "noise": draw.randbytes(3000).hex()}
            ledger.ingest(
                f"jt-bench{n:03d}/1", from_offset=pack, to_offset=pack + 1, events=[event], fields={}, checkpoints=[]
            )
    conn = sqlite3.connect(ledger_path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = sorted(
        n for (n,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'event_packs' AND pagetype = 'leaf'")
    )
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    offset = (pages[len(pages) // 2] - 1) * size
    with ledger_path.open("r+b") as f:
        f.seek(offset)
        f.write(draw.randbytes(4096))
    print(f"  injected: 4 KiB of random bytes at byte {offset:,} of {ledger_path} (a page of event packs)")
    before = hashlib.sha256(ledger_path.read_bytes()).hexdigest()
    env = {**os.environ, "JOBTRAIL_HOME": str(home)}

    def jobtrail(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobtrail", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    served = jobtrail("serve")
    first = served.stderr.strip().splitlines()[0] if served.stderr.strip() else ""
    checks = [
        kept(
            f"serve refused (exit {served.returncode}): {first[:160]}", served.returncode == 2 and "is damaged" in first
        )
    ]
    saved = root / "damaged_ledger.jsonl"
    exported = jobtrail("ledger", "export", str(saved))
    print("  export: " + " | ".join(exported.stdout.strip().splitlines()[:3]))
    checks.append(
        kept(
            "the ledger's bytes, untouched by serve and export",
            hashlib.sha256(ledger_path.read_bytes()).hexdigest() == before,
        )
    )
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
        if (home / name).exists():
            (home / name).rename(home / f"{name}.damaged")
    imported = jobtrail("ledger", "import", str(saved), "--json")
    listed = jobtrail("ps", "--json", "--limit", "100")
    jobs = len(json.loads(listed.stdout)["jobs"]) if listed.returncode == 0 else 0
    checks.append(
        kept(f"jobs in the new ledger after import: {jobs} of 20 (import exit {imported.returncode})", jobs == 20)
    )
    return checks


KILLED_AFTER_LAUNCH = """
import os
from jobtrail.app import build_service
from jobtrail.backends.local import LocalBackend
launch = LocalBackend.launch
def launch_then_die(self, request):
    launch(self, request)
    os._exit(9)
LocalBackend.launch = launch_then_die
build_service().refresh()
"""


def _killed_launch(root: Path) -> list[Check]:
    home = root / "killed_launch"
    os.environ["JOBTRAIL_HOME"] = str(home)
    from jobtrail.backends.local import LocalBackend
    from jobtrail.service.facade import JobService
    from jobtrail.service.tracker import STALE_CLAIM_S

    queuer = JobService(build_service(home).ledger, {"local": LocalBackend(max_concurrent=0)}, home, sys.executable)
    job_id = queuer.submit(_spec(root, max_steps=4)).job_id
    died = subprocess.run([sys.executable, "-c", KILLED_AFTER_LAUNCH], env=dict(os.environ), timeout=120).returncode
    print(f"  injected: the server that launched {job_id} died before recording it (exit {died})")
    restarted = build_service(home)
    attempt = restarted.ledger.get_attempt(f"{job_id}/1")
    _until((restarted.context.workdir(attempt) / "exit.json").exists, JOB_WAIT_S, "the unrecorded job to end")
    restarted.ledger.update_attempt(attempt.attempt_id, started_at=restarted.ledger.now() - STALE_CLAIM_S - 1)
    restarted.refresh()
    ended = restarted.inspect(job_id)
    checks = [
        kept(
            f"the ending: {ended.status} ({ended.termination_reason}), not lost",
            ended.termination_reason == "succeeded",
        )
    ]
    committed = [c.step for c in restarted.ledger.committed_checkpoints(job_id)]
    checks.append(
        kept(
            f"its checkpoints: steps {committed}; attempts: {len(ended.attempts)}",
            bool(committed) and len(ended.attempts) == 1,
        )
    )
    return checks


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support.records, as the tests use it
    sys.exit(main())
