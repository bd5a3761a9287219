"""The ledger: runs, attempts (the receipts), their events and checkpoints, in SQLite or PostgreSQL.

Several processes share one ledger (the MCP server, CLI commands, the demo; on PostgreSQL, servers on other
machines too), so every state change is a compare-and-set inside one writer's transaction
(connection.py: one writer at a time on either engine): whoever loses the race changes nothing and simply
reads the winner's result.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jobtrail.ledger import claims, deliveries, eventlog, records
from jobtrail.ledger.blobs import put_blobs, read_blobs, read_script
from jobtrail.ledger.codec import CorruptBlobError, hex_of, json_bytes, key, manifest_key, stored_path
from jobtrail.ledger.connection import LedgerConnection, Row, damaged, opener
from jobtrail.ledger.db import check, migrate
from jobtrail.models import (
    AttemptRecord,
    CalibrationRow,
    CapState,
    CheckpointRecord,
    EvalRow,
    JobSpec,
    JobStatus,
    NewAttempt,
    RunRecord,
    SpendGroup,
    WebhookDelivery,
)

_RUN_COLUMNS = (
    "run_id",
    "created_at",
    "method",
    "model",
    "dataset",
    "backend",
    "flavor",
    "max_retries",
    "max_cost_usd",
    "idempotency_key",
)
ACTIVE_STATUSES = (JobStatus.STARTING.value, JobStatus.RUNNING.value)
# report(group_by=...) (requests.REPORT_GROUPS) → the SQL expression it groups on (a whitelist: never interpolate
# input).
GROUP_COLUMNS = {
    "termination_reason": "a.termination_reason",
    "method": "r.method",
    "backend": "a.backend",
    "flavor": "COALESCE(a.flavor, a.backend)",
    "model": "r.model",
}


class RunIdTaken(Exception):
    """A new run's id is another run's already: the caller draws a new one."""


class Ledger:
    def __init__(self, location: Path | str, read_only: bool = False) -> None:
        """`location`: a SQLite file's path, or a PostgreSQL URL (postgresql://...). Checked, then migrated (db.py);
        `read_only`: neither, and nothing is ever written (a damaged ledger, `serve --read-only`)."""
        self.location = location
        self.read_only = read_only
        self._open = opener(location, read_only)
        self._local = threading.local()  # a connection never crosses threads
        self._packs = eventlog.PackCache()
        if not read_only:
            check(location)
        conn = self._conn()  # now, so errors surface at start-up
        if not read_only:
            migrate(conn)

    def _conn(self) -> LedgerConnection:
        conn: LedgerConnection | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._local.conn = self._open()
        return conn

    # The query methods below read alike (SQL, then records from its rows): each asks its own question.
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Every row a read-only query returns."""
        return self._conn().execute(sql, params).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[LedgerConnection]:
        conn = self._conn()
        with conn.transaction():
            yield conn

    # --- runs -------------------------------------------------------------------------

    def add_run(self, run: RunRecord, first_attempt: NewAttempt, request: dict[str, Any] | None = None) -> str | None:
        """Insert a run and its first attempt. A run with an idempotency_key that another run already holds
        is not inserted: that run's id comes back instead (None: inserted). The look-up and the insert are one
        writer's transaction and the key is UNIQUE, so processes racing with one key make one run. RunIdTaken:
        another run has this id (ids are drawn at random, by every server sharing the ledger)."""
        with self.transaction() as conn:
            if run.idempotency_key is not None:
                held = conn.execute(
                    "SELECT run_id FROM runs WHERE idempotency_key = ?", (run.idempotency_key,)
                ).fetchone()
                if held:
                    return str(held["run_id"])
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                raise RunIdTaken(run.run_id)  # checked inside the write lock: never overwritten
            conn.execute(
                "INSERT INTO runs (run_id, created_at, method, model, dataset, backend, flavor, spec_sha256,"
                " max_retries, max_cost_usd, idempotency_key, request_json, after_run_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.run_id,
                    run.created_at,
                    run.method,
                    run.model,
                    run.dataset,
                    run.backend,
                    run.flavor,
                    key(put_blobs(conn, [json_bytes(run.spec.model_dump(mode="json"))])[0]),
                    run.max_retries,
                    run.max_cost_usd,
                    run.idempotency_key,
                    json.dumps(request, sort_keys=True) if request is not None else None,
                    run.spec.after,
                ),
            )
            self._insert_attempt(conn, first_attempt)
            return None

    def run_by_idempotency_key(self, key: str) -> tuple[RunRecord, dict[str, Any]] | None:
        """The run submitted with this key, and the normalised request it was submitted with."""
        rows = self._rows("SELECT * FROM runs WHERE idempotency_key = ?", (key,))
        return (self._runs(rows)[0], json.loads(rows[0]["request_json"] or "{}")) if rows else None

    def children(self, run_ids: Sequence[str]) -> dict[str, list[str]]:
        """The runs that wait for (or waited for) each of these runs (after=...), oldest first."""
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        rows = self._rows(
            f"SELECT after_run_id, run_id FROM runs WHERE after_run_id IN ({marks}) ORDER BY created_at", run_ids
        )
        found: dict[str, list[str]] = {}
        for row in rows:
            found.setdefault(row["after_run_id"], []).append(row["run_id"])
        return found

    def add_attempt(self, attempt: NewAttempt) -> bool:
        """Add the next attempt of a run; False if another process added that number first."""
        with self.transaction() as conn:
            if conn.execute(
                "SELECT 1 FROM attempts WHERE run_id = ? AND number = ?", (attempt.run_id, attempt.number)
            ).fetchone():
                return False
            self._insert_attempt(conn, attempt)
            return True

    def set_max_cost(self, run_id: str, max_cost_usd: float) -> None:
        """A new spending cap for a run (retry(changes={"max_cost_usd": ...}) raises it)."""
        with self.transaction() as conn:
            conn.execute("UPDATE runs SET max_cost_usd = ? WHERE run_id = ?", (max_cost_usd, run_id))

    def get_run(self, run_id: str) -> RunRecord | None:
        runs = self._runs(self._rows("SELECT * FROM runs WHERE run_id = ?", (run_id,)))
        return runs[0] if runs else None

    def runs_created_since(self, since: float) -> list[str]:
        """The ids of the runs created since `since`, from the index on created_at alone."""
        return [row["run_id"] for row in self._rows("SELECT run_id FROM runs WHERE created_at >= ?", (since,))]

    def list_runs(self, status: str | None, limit: int) -> list[tuple[RunRecord, AttemptRecord]]:
        """Newest runs first, each with its latest attempt (whose status is the run's)."""
        # Without a status, the newest `limit` runs are taken first (from the index on created_at): PostgreSQL
        # would otherwise join every run to its latest attempt before it sorts (84 ms at 20,000 attempts).
        runs = "runs" if status else "(SELECT * FROM runs ORDER BY created_at DESC LIMIT ?)"
        sql = (
            f"SELECT r.*, a.attempt_id AS latest FROM {runs} r JOIN attempts a ON a.run_id = r.run_id"
            " AND a.number = (SELECT MAX(number) FROM attempts WHERE run_id = r.run_id)"
        )
        params: list[Any] = [] if status else [limit]
        if status:
            sql += " WHERE a.status = ?"
            params.append(status)
        sql += " ORDER BY r.created_at DESC LIMIT ?"
        params.append(limit)
        rows = self._rows(sql, params)
        if not rows:
            return []
        marks = ", ".join("?" for _ in rows)
        latest = {
            a.attempt_id: a
            for a in self._attempts(
                f"SELECT * FROM attempts WHERE attempt_id IN ({marks})", [r["latest"] for r in rows]
            )
        }
        return list(zip(self._runs(rows), [latest[r["latest"]] for r in rows], strict=True))

    def _runs(self, rows: Sequence[Row]) -> list[RunRecord]:
        specs = self._blobs(rows, ["spec_sha256"])
        return [
            RunRecord(
                **{k: row[k] for k in _RUN_COLUMNS}, spec=JobSpec.model_validate_json(specs[hex_of(row["spec_sha256"])])
            )
            for row in rows
        ]

    def _blobs(self, rows: Sequence[Row], columns: Sequence[str]) -> dict[str, bytes]:
        """The blobs these rows name in these columns, read at once."""
        named = {hex_of(row[column]) for row in rows for column in columns if row[column]}
        found = read_blobs(self._conn(), named)
        if len(found) != len(named):
            raise CorruptBlobError(f"the ledger lacks the blobs {sorted(named - set(found))}")
        return found

    def script(self, script_sha256: str) -> str:
        """The script an attempt ran, read where it is used (a launch, a retry, a dry run that shows it): the
        records leave it out."""
        script = read_script(self._conn(), script_sha256)
        if script is None:
            raise LookupError(f"no script {script_sha256} in the ledger")
        return script

    # --- attempts ---------------------------------------------------------------------

    def _insert_attempt(self, conn: LedgerConnection, attempt: NewAttempt) -> None:
        values = records.attempt_columns(conn, attempt.model_dump(mode="python"))
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        conn.execute(f"INSERT INTO attempts ({names}) VALUES ({marks})", list(values.values()))

    def _attempts(self, sql: str, params: Sequence[Any] = ()) -> list[AttemptRecord]:
        """The attempts a query selects (SELECT * FROM attempts ...), with their receipts from the blobs."""
        rows = self._rows(sql, params)
        blobs = self._blobs(rows, list(records.BLOB_FIELDS.values()))
        return [records.attempt_of(row, blobs) for row in rows]

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        found = self._attempts("SELECT * FROM attempts WHERE attempt_id = ?", (attempt_id,))
        return found[0] if found else None

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        return self._attempts("SELECT * FROM attempts WHERE run_id = ? ORDER BY number", (run_id,))

    def attempts_of(self, run_ids: Sequence[str]) -> dict[str, list[AttemptRecord]]:
        """Each run's attempts in order, read at once (ps lists 20 runs: one query, not 20 round trips)."""
        found: dict[str, list[AttemptRecord]] = {run_id: [] for run_id in run_ids}
        if run_ids:
            marks = ", ".join("?" for _ in run_ids)
            sql = f"SELECT * FROM attempts WHERE run_id IN ({marks}) ORDER BY run_id, number"
            for attempt in self._attempts(sql, list(run_ids)):
                found[attempt.run_id].append(attempt)
        return found

    def attempts_in(self, statuses: Sequence[str], backend: str | None = None) -> list[AttemptRecord]:
        marks = ", ".join("?" for _ in statuses)
        sql = f"SELECT * FROM attempts WHERE status IN ({marks})"
        params: list[Any] = list(statuses)
        if backend:
            sql += " AND backend = ?"
            params.append(backend)
        return self._attempts(sql + " ORDER BY created_at", params)

    def ended_spend_since(self, since: float) -> list[tuple[float, float, float]]:
        """(started_at, ended_at, cost_usd) of each attempt that ran and ended since `since`: what a spending
        window counts of them, read from the index on ended_at without their receipts."""
        rows = self._rows(
            "SELECT started_at, ended_at, cost_usd FROM attempts WHERE ended_at >= ? AND started_at IS NOT NULL",
            (since,),
        )
        return [(row["started_at"], row["ended_at"], row["cost_usd"] or 0.0) for row in rows]

    def cap_states(self, since: float, limit: int) -> tuple[int, list[CapState]]:
        """Remote runs with a spending cap, created since `since` or still active: how many, and the newest `limit`
        of those that need a look (still active, or stopped by their cap). A week of a busy team holds thousands of
        capped jobs that simply finished: they are counted, not listed."""
        active = ", ".join("?" for _ in ACTIVE_STATUSES)
        capped = "r.max_cost_usd IS NOT NULL AND r.backend <> 'local'"
        # Index ranges only, never one OR over every run: the runs created since (their cap and backend are in the
        # index), then the capped runs created earlier that are still active (a handful).
        count = self._rows(f"SELECT COUNT(*) AS n FROM runs r WHERE r.created_at >= ? AND {capped}", (since,))[0]["n"]
        count += self._rows(
            f"SELECT COUNT(DISTINCT r.run_id) AS n FROM attempts a JOIN runs r ON r.run_id = a.run_id"
            f" WHERE a.status IN ({active}) AND r.created_at < ? AND {capped}",
            (*ACTIVE_STATUSES, since),
        )[0]["n"]
        rows = self._rows(
            "SELECT r.run_id, r.max_cost_usd, a.status, a.termination_reason, (SELECT COALESCE(SUM(e.cost_usd), 0)"
            " FROM attempts e WHERE e.run_id = r.run_id AND e.ended_at IS NOT NULL) AS spent_ended"
            " FROM runs r JOIN attempts a ON a.run_id = r.run_id"
            " AND a.number = (SELECT MAX(number) FROM attempts WHERE run_id = r.run_id)"
            f" WHERE {capped} AND (a.status IN ({active}) OR a.termination_reason = 'budget') AND r.run_id IN"
            f" (SELECT run_id FROM attempts WHERE status IN ({active})"
            " UNION SELECT run_id FROM attempts WHERE ended_at >= ? AND termination_reason = 'budget')"
            " ORDER BY r.created_at DESC LIMIT ?",
            (*ACTIVE_STATUSES, *ACTIVE_STATUSES, since, limit),
        )
        return int(count), [CapState(**dict(row)) for row in rows]

    def update_attempt(
        self,
        attempt_id: str,
        *,
        expect_status: Sequence[str] | None = None,
        then_add: NewAttempt | None = None,
        **fields: Any,
    ) -> bool:
        """Set fields; with expect_status, only if the attempt is still in one of those states. `then_add`: the
        attempt that follows it, inserted in the same transaction when the update applies (a smoke run ends and
        the full job is queued at once: no reader ever sees the run ended in between). An attempt that ends has
        its events packed into one pack (eventlog.merge)."""
        with self.transaction() as conn:
            updated = self._update(conn, attempt_id, expect_status, fields)
            if updated and JobStatus(fields.get("status", JobStatus.QUEUED)).is_terminal:
                eventlog.merge(conn, attempt_id)
            if updated and then_add is not None:
                self._insert_attempt(conn, then_add)
            return updated

    def claim_slot(self, attempt_id: str, backend: str, limit: int | None, host: str | None = None) -> claims.Claim:
        """Move a queued attempt to starting if its backend has fewer than `limit` attempts starting or running (on
        `host` alone when given: a local backend's slots are one machine's) and no other attempt of its run is
        starting or running ("busy"). The checks and the claim are one transaction, so processes dispatching at
        once never start more than `limit`, nor two attempts of a run. The claim records `host` and is stamped
        with the ledger's clock (claims.py). "taken": another process claimed (or cancelled) it first."""
        with self.transaction() as conn:
            return claims.claim(conn, attempt_id, backend, limit, host)

    def now(self) -> float:
        """The ledger's clock (claims.py): what claims are stamped with and aged by, on every server alike."""
        return claims.now(self._conn())

    def expire_claim(self, attempt_id: str, older_than_s: float, **fields: Any) -> bool:
        """Set fields (an ending) on a claim that is still unlaunched `older_than_s` after it was made, by the
        ledger's clock (claims.stale), in the transaction that checks it: a launch recorded meanwhile wins."""
        with self.transaction() as conn:
            if not claims.stale(conn, attempt_id, older_than_s):
                return False
            updated = self._update(conn, attempt_id, [JobStatus.STARTING.value], fields)
            if updated:
                eventlog.merge(conn, attempt_id)
            return updated

    def _update(
        self, conn: LedgerConnection, attempt_id: str, expect_status: Sequence[str] | None, fields: dict[str, Any]
    ) -> bool:
        values = records.attempt_columns(conn, fields)
        sql = "UPDATE attempts SET " + ", ".join(f"{name} = ?" for name in values) + " WHERE attempt_id = ?"
        params: list[Any] = [*values.values(), attempt_id]
        if expect_status is not None:
            sql += " AND status IN (" + ", ".join("?" for _ in expect_status) + ")"
            params.extend(expect_status)
        return conn.execute(sql, params).rowcount == 1

    # --- events and checkpoints -------------------------------------------------------

    def ingest(
        self,
        attempt_id: str,
        *,
        from_offset: int,
        to_offset: int,
        events: Sequence[dict[str, Any]],
        fields: dict[str, Any],
        checkpoints: Sequence[CheckpointRecord],
    ) -> bool:
        """Record the events parsed from log bytes [from_offset, to_offset) exactly once."""
        with self.transaction() as conn:
            updated = {**fields, "log_offset": to_offset}
            values = records.attempt_columns(conn, updated)
            sql = "UPDATE attempts SET " + ", ".join(f"{n} = ?" for n in values)
            sql += " WHERE attempt_id = ? AND log_offset = ?"
            if conn.execute(sql, [*values.values(), attempt_id, from_offset]).rowcount != 1:
                return False  # another process ingested these bytes first
            eventlog.append(conn, attempt_id, events)
            output_dir = conn.execute("SELECT output_dir FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()[
                "output_dir"
            ]
            conn.executemany(
                "INSERT INTO checkpoints (attempt_id, path, step, state, manifest_sha256, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (attempt_id, path) DO UPDATE SET"
                " step = excluded.step, state = excluded.state,"
                " manifest_sha256 = COALESCE(excluded.manifest_sha256, checkpoints.manifest_sha256),"
                " updated_at = excluded.updated_at",
                [
                    (
                        attempt_id,
                        stored_path(output_dir, c.path),
                        c.step,
                        c.state,
                        manifest_key(c.manifest_sha256),
                        c.updated_at,
                    )
                    for c in checkpoints
                ],
            )
            return True

    def events(self, attempt_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The attempt's events in the order it printed them; with `kind`, those of that kind."""
        return self._read_events([attempt_id], kind)[attempt_id]

    def events_of(self, attempt_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Each attempt's events, read at once."""
        return self._read_events(attempt_ids)

    def _read_events(self, attempt_ids: Sequence[str], kind: str | None = None) -> dict[str, list[dict[str, Any]]]:
        try:
            return eventlog.read(self._conn(), self._packs, attempt_ids, kind)
        except sqlite3.DatabaseError as exc:
            if not (self.read_only and damaged(exc)):
                raise
        # Read-only, a damaged ledger is read for what it still holds: each attempt alone, and one whose packs
        # cannot be read shows none (its row still says how it ended).
        if len(attempt_ids) == 1:
            return {attempt_ids[0]: []}
        found: dict[str, list[dict[str, Any]]] = {}
        for attempt_id in attempt_ids:
            found.update(self._read_events([attempt_id], kind))
        return found

    def report(self, since: float, group_by: str) -> list[SpendGroup]:
        """Attempts, GPU-hours and cost of attempts that ended since `since`, grouped."""
        column = GROUP_COLUMNS[group_by]
        # Every attempt has its run: the join is there only for a run's column, else the index alone answers.
        runs = " JOIN runs r ON r.run_id = a.run_id" if column.startswith("r.") else ""
        rows = self._rows(
            f"SELECT {column} AS grp, COUNT(*) AS attempts,"
            " COALESCE(SUM(a.gpu_seconds), 0) / 3600.0 AS gpu_hours, COALESCE(SUM(a.cost_usd), 0) AS cost_usd"
            f" FROM attempts a{runs} WHERE a.ended_at >= ? GROUP BY grp ORDER BY attempts DESC, grp",
            (since,),
        )
        return [SpendGroup(row["grp"], row["attempts"], row["gpu_hours"], row["cost_usd"]) for row in rows]

    # --- evaluations ------------------------------------------------------------------

    def add_eval(self, eval_attempt_id: str, target_run_id: str | None, checkpoint: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO evals (eval_attempt_id, target_run_id, checkpoint, state, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (eval_attempt_id, target_run_id, checkpoint, "queued", time.time()),
            )

    def finish_eval(self, eval_attempt_id: str, state: str, record: dict[str, Any] | None) -> None:
        record = record or {}
        with self.transaction() as conn:
            conn.execute(
                "UPDATE evals SET state = ?, finished_at = ?, metrics_json = ?, task_set_sha256 = ?,"
                " evaluator_sha256 = ?, record_json = ? WHERE eval_attempt_id = ?",
                (
                    state,
                    time.time(),
                    json.dumps(record.get("metrics") or {}),
                    (record.get("task_set") or {}).get("revision_or_sha256"),
                    (record.get("evaluator") or {}).get("sha256"),
                    json.dumps(record) if record else None,
                    eval_attempt_id,
                ),
            )

    def evals_of(self, target_run_id: str) -> list[EvalRow]:
        rows = self._rows("SELECT * FROM evals WHERE target_run_id = ? ORDER BY created_at", (target_run_id,))
        return [records.eval_of(r) for r in rows]

    def eval_by_job(self, eval_job_id: str) -> tuple[str | None, EvalRow] | None:
        """The job an evaluation job evaluated (None: a model alone), and the evaluation it made (its latest
        attempt's)."""
        row = (
            self._conn()
            .execute(
                "SELECT * FROM evals WHERE substr(eval_attempt_id, 1, ?) = ? ORDER BY created_at DESC LIMIT 1",
                (len(eval_job_id) + 1, f"{eval_job_id}/"),
            )
            .fetchone()
        )
        return None if row is None else (row["target_run_id"], records.eval_of(row))

    # --- webhook deliveries (deliveries.py) --------------------------------------------

    def claim_delivery(self, run_id: str, notice: str, event: str, attempt: int) -> bool:
        """Whether this server sends the notice (no other claimed it, or the one that did died sending)."""
        with self.transaction() as conn:
            return deliveries.claim(conn, run_id, notice, event, attempt)

    def record_delivery(
        self, run_id: str, notice: str, *, sent: bool, status_code: int | None, tries: int, error: str | None
    ) -> None:
        state: deliveries.DeliveryState = "sent" if sent else "failed"
        with self.transaction() as conn:
            deliveries.record(conn, run_id, notice, state=state, status_code=status_code, tries=tries, error=error)

    def deliveries(self, run_id: str) -> list[WebhookDelivery]:
        return deliveries.of_run(self._conn(), run_id)

    def checkpoints(self, attempt_id: str) -> list[CheckpointRecord]:
        rows = self._rows(
            "SELECT c.*, a.output_dir FROM checkpoints c JOIN attempts a ON a.attempt_id = c.attempt_id"
            " WHERE c.attempt_id = ? ORDER BY c.step, c.path",
            (attempt_id,),
        )
        return [records.checkpoint_of(r) for r in rows]

    def committed_checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        """Every committed checkpoint of a run: attempt by attempt, each attempt's by step. A smoke run's
        are its own (in its own directory): the run's checkpoints are the full job's."""
        rows = self._rows(
            "SELECT c.*, a.output_dir FROM checkpoints c JOIN attempts a ON a.attempt_id = c.attempt_id"
            " WHERE a.run_id = ? AND c.state = 'committed' AND a.smoke_steps IS NULL"
            " ORDER BY a.number, c.step, c.path",
            (run_id,),
        )
        return [records.checkpoint_of(r) for r in rows]

    # --- calibration ------------------------------------------------------------------

    def record_calibration(self, measurement: CalibrationRow) -> None:
        """Store one attempt's measured throughput and memory, stamped now; the same attempt again replaces it."""
        columns = records.CALIBRATION_COLUMNS
        names, marks = ", ".join(columns), ", ".join("?" for _ in columns)
        replaced = ", ".join(f"{name} = excluded.{name}" for name in columns[1:])
        with self.transaction() as conn:
            conn.execute(
                f"INSERT INTO calibration ({names}) VALUES ({marks}) ON CONFLICT (attempt_id) DO UPDATE SET {replaced}",
                records.calibration_values(measurement, time.time()),
            )

    def calibrations(
        self, *, architecture: str, params: int, method: str, peft: str, flavor: str, limit: int
    ) -> list[CalibrationRow]:
        """The newest `limit` measurements for one key, newest first."""
        rows = self._rows(
            "SELECT * FROM calibration WHERE architecture = ? AND params = ? AND method = ? AND peft = ?"
            " AND flavor = ? ORDER BY recorded_at DESC LIMIT ?",
            (architecture, int(params), method, peft, flavor, limit),
        )
        return [records.calibration_of(r) for r in rows]
