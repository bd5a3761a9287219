"""A record as its ledger row holds it, and back: an attempt's fields as column values (attempt_columns) and its
row as an AttemptRecord (attempt_of), a checkpoint's row and an evaluation's. How each value is held is codec.py's;
which blobs a row names, blobs.py's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from jobtrail.ledger.blobs import Executes, put_blobs, put_script
from jobtrail.ledger.codec import PACKED_FIELDS, full_path, hex_of, json_bytes, key, manifest_hex, packed, unpacked
from jobtrail.ledger.connection import Row
from jobtrail.models import AttemptRecord, CalibrationRow, CheckpointRecord, EvalRow
from jobtrail.util.digest import config_json

# Receipts that attempts repeat, stored once (blobs.py) and named by the sha256 in their column: the config
# (config_sha256, its canonical JSON's, as the receipt shows it) and the JSON that most attempts share.
BLOB_FIELDS = {
    "config": "config_sha256",
    "spec": "spec_sha256",
    "environment": "environment_sha256",
    "data_manifest": "data_manifest_sha256",
    "findings": "findings_sha256",
}
# The calibration table's columns, a CalibrationRow's fields: the first (attempt_id) is the key, the others are
# replaced when the same attempt is measured again.
CALIBRATION_COLUMNS = tuple(f.name for f in fields(CalibrationRow))


def calibration_values(row: CalibrationRow, recorded_at: float) -> list[Any]:
    """A measurement as the calibration table's columns hold it (gradient_checkpointing an INTEGER), in
    CALIBRATION_COLUMNS' order."""
    values = asdict(row) | {"params": int(row.params), "recorded_at": recorded_at}
    if row.gradient_checkpointing is not None:
        values["gradient_checkpointing"] = int(row.gradient_checkpointing)
    return [values[name] for name in CALIBRATION_COLUMNS]


def calibration_of(r: Row) -> CalibrationRow:
    checkpointing = r["gradient_checkpointing"]
    return CalibrationRow(
        **{**dict(r), "gradient_checkpointing": None if checkpointing is None else bool(checkpointing)}
    )


def eval_of(r: Row) -> EvalRow:
    return EvalRow(
        eval_job_id=r["eval_attempt_id"].split("/")[0],
        checkpoint=r["checkpoint"],
        state=r["state"],
        metrics=json.loads(r["metrics_json"]) if r["metrics_json"] else {},
        task_set_sha256=r["task_set_sha256"],
        evaluator_sha256=r["evaluator_sha256"],
        record=json.loads(r["record_json"]) if r["record_json"] else None,
    )


def checkpoint_of(row: Row) -> CheckpointRecord:
    return CheckpointRecord(
        path=full_path(row["output_dir"], row["path"]),
        step=row["step"],
        state=row["state"],
        manifest_sha256=manifest_hex(row["manifest_sha256"]),
        updated_at=row["updated_at"],
    )


def attempt_columns(conn: Executes, fields: dict[str, Any]) -> dict[str, Any]:
    """Column values of an attempt's fields. A script and the receipts in BLOB_FIELDS are stored once (blobs.py)
    and their columns name them; a sha256 given with them must be theirs."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "script":
            out["script_sha256"] = key(put_script(conn, value))
        elif name in BLOB_FIELDS:
            out[BLOB_FIELDS[name]] = None if value is None else key(put_blobs(conn, [_blob_bytes(name, value)])[0])
        elif name in PACKED_FIELDS:  # receipts of the attempt's own, in its row
            out[name] = packed(_plain(value))
        elif name == "forced":
            out[name] = int(bool(value))
        elif hasattr(value, "value"):  # enums
            out[name] = value.value
        elif name in ("config_sha256", "script_sha256"):  # their contents' when given with them (checked below)
            out.setdefault(name, key(value))
        elif name not in out:
            out[name] = value
    for given in ("config_sha256", "script_sha256"):
        if given in fields and key(fields[given]) != out[given]:
            raise ValueError(f"{given} {fields[given]!r} is not the sha256 of the attempt's {given[:-7]}")
    return out


def _blob_bytes(name: str, value: Any) -> bytes:
    plain = _plain(value)
    return config_json(plain).encode() if name == "config" else json_bytes(plain)


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def attempt_of(row: Row, blobs: dict[str, bytes]) -> AttemptRecord:
    data = dict(row)
    for name in PACKED_FIELDS:
        data[name] = unpacked(data[name])
    for name, column in BLOB_FIELDS.items():
        reference = hex_of(data[column]) if data[column] else None
        if name == "config":
            data[column] = reference
        else:
            del data[column]
        data[name] = json.loads(blobs[reference]) if reference else None
    data["script_sha256"] = hex_of(data["script_sha256"])
    data["findings"] = data["findings"] or []
    return AttemptRecord.model_validate(data)
