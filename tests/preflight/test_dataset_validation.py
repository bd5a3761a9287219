"""validate_dataset (jobtrail.preflight.dataset) and the dataset_mapping language (scripts/_mapping.py).

The table below is the contract: one row per dataset shape (good and bad, every TRL format, the
common other shapes, every local source type) with the verdict expected for each method. Mappings
the validator proposes are then applied with the job runtime's own apply_mapping and must validate
READY; one real SFT run per mapping kind proves the rendered script applies them too. The test
process never imports transformers: token lengths are measured in a subprocess.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from jobtrail.demo.tinymodel import write_chat_dataset, write_prompt_completion_dataset
from jobtrail.errors import InvalidRequestError
from jobtrail.methods import METHODS
from jobtrail.models import JobSpec
from jobtrail.preflight import dataset as ds
from jobtrail.preflight.dataset import DatasetReport, validate_dataset
from jobtrail.preflight.dataset.shapes import PLANNERS
from jobtrail.preflight.plan import job_values
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import render_script
from support.jobs import run_jobs

VERDICT = {"R": "READY", "N": "NEEDS_MAPPING", "I": "INCOMPATIBLE"}


# --- building datasets ---------------------------------------------------------------------------


def turns(*pairs: tuple[str, Any], role: str = "role", content: str = "content") -> list[dict[str, Any]]:
    return [{role: r, content: c} for r, c in pairs]


USER_ASSISTANT = turns(("user", "What color is the sky?"), ("assistant", "The sky is blue."))
QA = [("What color is the sky?", "The sky is blue."), ("What comes after one?", "After one comes two.")]


def rows_of(make: Callable[[str, str], dict[str, Any]], n: int = 4) -> list[dict[str, Any]]:
    return [make(*QA[i % len(QA)]) for i in range(n)]


@dataclass
class Shape:
    """One dataset shape: file content, the verdicts expected (sft dpo grpo reward kto), extras."""

    name: str
    file: str  # file name; its suffix picks the writer
    content: Any  # rows (list of dicts / raw lines) for jsonl and parquet, an object for json, text for csv
    verdicts: str  # five letters R/N/I in METHODS order, or "" when nothing could be read
    format: str | None = None
    problem: tuple[int, str] | None = None  # (row or line number, text the problem contains)
    finding: str | None = None  # a finding code the report must hold
    extra: dict[str, Any] = field(default_factory=dict)

    def write(self, folder: Path) -> Path:
        path = folder / self.file
        suffix = path.suffix
        if suffix == ".jsonl":
            text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in self.content)
            path.write_text(text)
        elif suffix == ".json":
            path.write_text(self.content if isinstance(self.content, str) else json.dumps(self.content))
        elif suffix == ".csv":
            path.write_text(self.content)
        elif suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(self.content), path)
        else:
            path.write_bytes(self.content)
        return path


def pc(p: str, c: str) -> dict[str, Any]:
    return {"prompt": p, "completion": " " + c}


def chat(q: str, a: str, *, column: str = "messages", system: bool = False) -> dict[str, Any]:
    return {column: turns(*([("system", "Be brief.")] if system else []), ("user", q), ("assistant", a))}


def pref(q: str, a: str) -> dict[str, Any]:
    return {"prompt": q, "chosen": a, "rejected": "No."}


def sharegpt(q: str, a: str, *, system: bool = False) -> dict[str, Any]:
    pairs = [*([("system", "Be brief.")] if system else []), ("human", q), ("gpt", a)]
    return {"conversations": turns(*pairs, role="from", content="value")}


SHAPES: list[Shape] = [
    # --- TRL formats, as they are ------------------------------------------------------------
    Shape("messages", "m.jsonl", rows_of(chat), "RIIII", "messages"),
    Shape("messages_system", "ms.jsonl", rows_of(lambda q, a: chat(q, a, system=True)), "RIIII", "messages"),
    Shape(
        "messages_tool_call",
        "mt.jsonl",
        [
            {
                "messages": [
                    {"role": "user", "content": "Weather?"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {}}}],
                    },
                    {"role": "tool", "content": "sunny"},
                    {"role": "assistant", "content": "Sunny."},
                ]
            }
        ],
        "RIIII",
        "messages",
    ),
    Shape("text", "t.jsonl", rows_of(lambda q, a: {"text": f"{q} {a}"}), "RIIII", "text"),
    Shape("prompt_completion", "pc.jsonl", rows_of(pc), "RIRII", "prompt_completion"),
    Shape(
        "prompt_completion_conversational",
        "pcc.jsonl",
        rows_of(lambda q, a: {"prompt": turns(("user", q)), "completion": turns(("assistant", a))}),
        "RIRII",
        "prompt_completion",
        extra={"conversational": True},
    ),
    Shape("preference_explicit", "pe.jsonl", rows_of(pref), "NRRRR", "preference"),
    Shape(
        "preference_explicit_conversational",
        "pec.jsonl",
        rows_of(
            lambda q, a: {
                "prompt": turns(("user", q)),
                "chosen": turns(("assistant", a)),
                "rejected": turns(("assistant", "No.")),
            }
        ),
        "NRRRR",
        "preference",
    ),
    Shape(
        "preference_implicit",
        "pi.jsonl",
        rows_of(lambda q, a: {"chosen": f"{q} {a}", "rejected": f"{q} No."}),
        "NRIRR",
        "preference_implicit_prompt",
    ),
    Shape(
        "preference_implicit_conversational",
        "pic.jsonl",
        rows_of(
            lambda q, a: {
                "chosen": turns(("user", q), ("assistant", a)),
                "rejected": turns(("user", q), ("assistant", "No.")),
            }
        ),
        "NRIRR",
        "preference_implicit_prompt",
    ),
    Shape("prompt_only", "po.jsonl", rows_of(lambda q, a: {"prompt": q}), "IIRII", "prompt_only"),
    Shape(
        "prompt_only_conversational_with_reward_column",
        "poc.jsonl",
        rows_of(lambda q, a: {"prompt": turns(("user", q)), "solution": a}),
        "IIRII",
        "prompt_only",
    ),
    Shape(
        "unpaired_preference",
        "up.jsonl",
        [{"prompt": q, "completion": a, "label": i % 2 == 0} for i, (q, a) in enumerate(QA * 2)],
        "IIRIR",
        "unpaired_preference",
    ),
    # --- other shapes: a mapping makes them fit ------------------------------------------------
    Shape("sharegpt", "sg.jsonl", rows_of(sharegpt), "NIIII", "sharegpt"),
    Shape("sharegpt_system", "sgs.jsonl", rows_of(lambda q, a: sharegpt(q, a, system=True)), "NIIII", "sharegpt"),
    Shape(
        "conversation_renamed", "cr.jsonl", rows_of(lambda q, a: chat(q, a, column="conversation")), "NIIII", "sharegpt"
    ),
    Shape(
        "messages_with_sharegpt_roles",
        "mr.jsonl",
        rows_of(lambda q, a: {"messages": turns(("human", q), ("gpt", a))}),
        "NIIII",
        "messages",
    ),
    Shape("alpaca", "al.jsonl", rows_of(lambda q, a: {"instruction": q, "input": "", "output": a}), "NINII", "alpaca"),
    Shape(
        "alpaca_with_input",
        "ali.jsonl",
        rows_of(lambda q, a: {"instruction": "Answer briefly.", "input": q, "output": a}),
        "NINII",
        "alpaca",
    ),
    Shape(
        "alpaca_without_input", "aln.jsonl", rows_of(lambda q, a: {"instruction": q, "output": a}), "NINII", "alpaca"
    ),
    Shape(
        "dolly", "do.jsonl", rows_of(lambda q, a: {"instruction": q, "context": "", "response": a}), "NINII", "alpaca"
    ),
    Shape(
        "question_answer", "qa.jsonl", rows_of(lambda q, a: {"question": q, "answer": a}), "NINII", "question_answer"
    ),
    Shape(
        "problem_solution", "ps.jsonl", rows_of(lambda q, a: {"problem": q, "solution": a}), "NINII", "question_answer"
    ),
    Shape(
        "response_chosen_rejected",
        "rcr.jsonl",
        rows_of(lambda q, a: {"prompt": q, "response_chosen": a, "response_rejected": "No"}),
        "NNRNN",
        "preference_renamed",
    ),
    Shape(
        "good_bad",
        "gb.jsonl",
        rows_of(lambda q, a: {"question": q, "good": a, "bad": "No."}),
        "NNNNN",
        "preference_renamed",
    ),
    Shape(
        "unpaired_renamed",
        "ur.jsonl",
        [{"question": q, "answer": a, "label": True} for q, a in QA],
        "IININ",
        "question_answer",
    ),
    # --- bad rows ------------------------------------------------------------------------------
    Shape(
        "messages_is_a_string",
        "bs.jsonl",
        [{"messages": "user: hi / assistant: hello"}],
        "IIIII",
        "messages",
        problem=(1, "expected a list of {role, content} messages"),
    ),
    Shape(
        "unknown_role",
        "br.jsonl",
        [
            {"messages": turns(("user", "hi"), ("assistant", "yo"))},
            {"messages": turns(("user", "hi"), ("narrator", "yo"))},
        ],
        "IIIII",
        "messages",
        problem=(2, "messages[1].role 'narrator' is not a chat role"),
    ),
    Shape(
        "missing_content",
        "bc.jsonl",
        [{"messages": [{"role": "user"}, {"role": "assistant", "content": "yo"}]}],
        "IIIII",
        "messages",
        problem=(1, "messages[0] (user) has no 'content'"),
    ),
    Shape(
        "no_assistant_turn",
        "ba.jsonl",
        [{"messages": turns(("user", "hi"))}],
        "IIIII",
        "messages",
        problem=(1, "no assistant turn to learn from"),
    ),
    Shape(
        "turns_do_not_alternate",
        "bt.jsonl",
        [{"messages": turns(("user", "hi"), ("user", "hey"), ("assistant", "yo"))}],
        "IIIII",
        "messages",
        problem=(1, "turns do not alternate: messages[0] and messages[1] are both 'user'"),
    ),
    Shape(
        "message_not_an_object",
        "bo.jsonl",
        [{"messages": ["hi", "yo"]}],
        "IIIII",
        "messages",
        problem=(1, "messages[0] is string, expected {role, content}"),
    ),
    Shape(
        "not_json_line",
        "bj.jsonl",
        [{"text": "one"}, {"text": "two"}, "{this is not json", {"text": "four"}],
        "IIIII",
        "text",
        problem=(3, "is not valid JSON"),
    ),
    Shape(
        "json_array_line",
        "bl.jsonl",
        [{"text": "one"}, [1, 2]],
        "IIIII",
        "text",
        problem=(2, "is a JSON list[integer], not an object"),
    ),
    Shape("text_null", "bn.jsonl", [{"text": "one"}, {"text": None}], "IIIII", "text", problem=(2, "'text' is null")),
    Shape(
        "mixed_prompt_completion",
        "bm.jsonl",
        [{"prompt": "hi", "completion": turns(("assistant", "yo"))}],
        "IIRII",
        "prompt_completion",
        problem=(1, "both must be the same kind"),
    ),
    Shape(
        "kto_label_not_bool",
        "bk.jsonl",
        [{"prompt": "hi", "completion": "yo", "label": 1}],
        "IIRII",
        "unpaired_preference",
        problem=(1, "'label' is 1 (integer); KTO needs true or false"),
    ),
    Shape(
        "chosen_equals_rejected",
        "be.jsonl",
        [{"prompt": "hi", "chosen": "yo", "rejected": "yo"}],
        "NRRRR",
        "preference",
        problem=(1, "identical"),
    ),
    Shape("unknown_columns", "bu.jsonl", [{"foo": 1, "bar": "x"}], "IIIII", "unknown"),
    Shape("empty_file", "e.jsonl", [], "", finding="dataset.empty"),
    Shape("blank_lines_only", "eb.jsonl", ["", "   "], "", finding="dataset.empty"),
    Shape("nothing_readable", "nr.jsonl", ["nope", "{]"], "", finding="dataset.unreadable"),
    # --- source types --------------------------------------------------------------------------
    Shape(
        "csv_prompt_completion",
        "c.csv",
        "prompt,completion\nWhat color is the sky?,The sky is blue.\nHi,Hello\n",
        "RIRII",
        "prompt_completion",
    ),
    Shape(
        "csv_kto_bool_labels",
        "ck.csv",
        "prompt,completion,label\nhi,yo,True\nhi,no,False\n",
        "IIRIR",
        "unpaired_preference",
    ),
    Shape(
        "csv_messages_as_json_text",
        "cm.csv",
        'messages\n"[{""role"": ""user"", ""content"": ""hi""}]"\n',
        "IIIII",
        "messages",
        problem=(1, "'messages' is string"),
    ),
    Shape(
        "csv_ragged_row",
        "cr.csv",
        "text\none\ntwo,three\n",
        "IIIII",
        "text",
        problem=(2, "has 2 fields; the header has 1"),
    ),
    Shape(
        "csv_empty_cell",
        "ce.csv",
        "prompt,completion\nhi,\n",
        "IIRII",
        "prompt_completion",
        problem=(1, "'completion' is null"),
    ),
    Shape("csv_header_only", "ch.csv", "prompt,completion\n", "", finding="dataset.empty"),
    Shape("json_list", "j.json", rows_of(chat), "RIIII", "messages"),
    Shape(
        "json_nested_under_data",
        "jn.json",
        {"data": rows_of(lambda q, a: {"text": q})},
        "RIIII",
        "text",
        finding="dataset.nested_json",
    ),
    Shape("json_holding_json_lines", "jl.json", "\n".join(json.dumps({"text": q}) for q, _ in QA), "RIIII", "text"),
    Shape("json_invalid", "ji.json", '[{"text": "a"},\n {"text": }]', "", finding="dataset.invalid_json"),
    Shape("json_scalar", "js.json", "42", "", finding="dataset.invalid_json"),
    Shape("parquet_messages", "p.parquet", rows_of(chat), "RIIII", "messages"),
    Shape("parquet_preference", "pp.parquet", rows_of(pref), "NRRRR", "preference"),
    Shape("parquet_corrupt", "pb.parquet", None, "", finding="dataset.unreadable"),
    Shape("unsupported_extension", "x.txt", b"hello\n", "", finding="dataset.format"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every shape of the table, written once."""
    path = tmp_path_factory.mktemp("shapes")
    for shape in SHAPES:
        write_shape(shape, path)
    return path


def write_shape(shape: Shape, folder: Path) -> Path:
    if shape.name == "parquet_corrupt":
        path = folder / shape.file
        path.write_bytes(b"PAR1" + bytes(range(200)) + b"PAR1")
        return path
    return shape.write(folder)


@pytest.fixture(scope="module")
def reports(folder: Path) -> dict[str, DatasetReport]:
    return {shape.name: validate_dataset(str(folder / shape.file)) for shape in SHAPES}


def test_the_table_covers_enough_shapes() -> None:
    assert len(SHAPES) >= 30 and len({s.name for s in SHAPES}) == len(SHAPES)
    assert {Path(s.file).suffix for s in SHAPES} >= {".jsonl", ".json", ".csv", ".parquet"}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_verdicts_per_method(shape: Shape, reports: dict[str, DatasetReport]) -> None:
    report = reports[shape.name]
    got = {m: v.status for m, v in report.methods.items()}
    expected = {m: VERDICT[letter] for m, letter in zip(METHODS, shape.verdicts, strict=False)}
    assert got == expected, report.to_markdown()
    if shape.format:
        assert report.format == shape.format, report.to_markdown()
    if shape.problem:
        number, text = shape.problem
        assert any(p.row == number and text in p.problem for p in report.problems), report.to_markdown()
    if shape.finding:
        assert shape.finding in {f.code for f in report.findings}, report.to_markdown()
    for key, value in shape.extra.items():
        assert getattr(report, key) == value
    for verdict in report.methods.values():
        assert (verdict.mapping is not None) == (verdict.status == "NEEDS_MAPPING") == (verdict.python is not None)
        assert verdict.status == "READY" or verdict.fix
    text = report.to_markdown()
    assert text.startswith("**Dataset") and "Traceback" not in text
    json.loads(report.model_dump_json())  # the structured result is always JSON-able


def test_report_fields_for_a_good_file(reports: dict[str, DatasetReport], folder: Path) -> None:
    report = reports["messages"]
    assert (report.source, report.rows, report.rows_checked, report.row_numbering) == ("file", 4, 4, "line")
    assert [(c.name, c.type) for c in report.columns] == [("messages", "messages")]
    assert report.conversational and report.problems == [] and report.problems_total == 0
    assert len(report.samples) == 3 and report.samples[0]["messages"][0]["role"] == "user"
    assert report.findings == [] and report.token_lengths is None


def test_markdown_leads_with_verdicts_and_ends_with_the_mapping(reports: dict[str, DatasetReport]) -> None:
    text = reports["sharegpt"].to_markdown()
    lines = text.splitlines()
    assert lines[1].startswith("~ sft    NEEDS_MAPPING") and lines[2].startswith("✗ dpo")
    mapping = reports["sharegpt"].methods["sft"].mapping
    assert f"dataset_mapping={json.dumps(mapping)}" in text and "```python" in text


def test_method_argument_checks_one_method_and_adds_a_finding(folder: Path) -> None:
    report = validate_dataset(str(folder / "sg.jsonl"), method="sft")
    assert list(report.methods) == ["sft"]
    (finding,) = report.findings
    assert finding.code == "dataset.columns" and finding.severity == "error"
    assert finding.fix and '"kind": "sharegpt"' in finding.fix
    incompatible = validate_dataset(str(folder / "sg.jsonl"), method="dpo")
    assert [f.code for f in incompatible.findings] == ["dataset.incompatible"]
    assert validate_dataset(str(folder / "m.jsonl"), method="sft").findings == []


def test_problems_are_capped_but_counted(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text("".join("not json\n" if i % 2 else json.dumps({"text": f"row {i}"}) + "\n" for i in range(60)))
    report = validate_dataset(str(path))
    assert report.problems_total == 30 and len(report.problems) == ds.MAX_PROBLEMS
    assert [p.row for p in report.problems[:3]] == [2, 4, 6]
    assert "20 of 30" in report.to_markdown()


def test_max_rows_bounds_the_work_and_says_so(tmp_path: Path) -> None:
    path = write_chat_dataset(tmp_path / "chat.jsonl", rows=50)
    report = validate_dataset(str(path), max_rows=10)
    assert (report.rows, report.rows_checked) == (50, 10)
    assert "50 rows, 10 checked" in report.to_markdown()


def test_missing_file_is_a_finding_not_an_exception(tmp_path: Path) -> None:
    report = validate_dataset(str(tmp_path / "nope.jsonl"))
    assert [(f.code, f.severity) for f in report.findings] == [("dataset.missing", "error")]
    assert report.methods == {} and "No verdict" in report.to_markdown()


def test_an_unreadable_file_is_a_finding(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: Path, max_rows: int) -> Any:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ds.files, "_read_jsonl", denied)
    (finding,) = validate_dataset(str(folder / "m.jsonl")).findings
    assert finding.code == "dataset.unreadable" and "Permission denied" in finding.message


def test_split_of_a_single_file_is_the_train_split(folder: Path) -> None:
    report = validate_dataset(str(folder / "m.jsonl"), split="test")
    assert report.methods["sft"].status == "READY"
    assert [f.code for f in report.findings] == ["dataset.split"]


def test_a_model_directory_passed_as_the_dataset_is_called_a_model(tiny_model: Path) -> None:
    # Read as data, its config.json was judged as the dataset's one row.
    report = validate_dataset(str(tiny_model))
    [error] = report.findings
    assert (error.code, error.severity) == ("dataset.is_model", "error") and report.data_file is None
    assert "is a model directory" in error.message and error.fix and "model=" in error.fix


def test_directory_picks_the_split_file(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    write_chat_dataset(tmp_path / "data" / "train-00000-of-00001.jsonl", rows=4)
    write_prompt_completion_dataset(tmp_path / "data" / "test-00000-of-00001.jsonl", rows=3)
    assert validate_dataset(str(tmp_path)).format == "messages"
    test_split = validate_dataset(str(tmp_path), split="test")
    assert (test_split.format, test_split.rows, test_split.data_file) == (
        "prompt_completion",
        3,
        "data/test-00000-of-00001.jsonl",
    )
    assert [f.code for f in validate_dataset(str(tmp_path), split="validation").findings] == ["dataset.split"]


@pytest.mark.parametrize(
    ("files", "split", "picked"),
    [
        (
            [
                "README.md",
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet",
                "data/test-0.parquet",
            ],
            "train",
            ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"],
        ),
        (["train.jsonl", "validation.jsonl"], "validation", ["validation.jsonl"]),
        (["dev.jsonl", "train.jsonl"], "validation", ["dev.jsonl"]),
        (["default/train/0000.parquet", "default/test/0000.parquet"], "test", ["default/test/0000.parquet"]),
        (["conversations.jsonl"], "train", ["conversations.jsonl"]),  # no split names: all of it is train
        (["constraint.jsonl", "test.jsonl"], "train", []),  # 'train' inside a word is not the split
        (["script.py", ".hidden/train.jsonl"], "train", []),
    ],
)
def test_split_files(files: list[str], split: str, picked: list[str]) -> None:
    assert ds.read.split_files(files, split) == picked


def test_a_given_mapping_is_applied_before_judging(folder: Path) -> None:
    mapping = {"kind": "rename", "columns": {"question": "prompt", "answer": "completion"}}
    report = validate_dataset(str(folder / "qa.jsonl"), method="sft", mapping=mapping)
    assert report.methods["sft"].status == "READY" and report.format == "prompt_completion"
    assert report.mapping == mapping and report.findings == []
    broken = validate_dataset(str(folder / "m.jsonl"), mapping={"kind": "rename", "columns": {"nope": "x"}})
    assert broken.methods["sft"].status == "INCOMPATIBLE"
    assert "dataset_mapping fails" in broken.problems[0].problem
    # submit's findings carry the verdict, not `problems`: the verdict names the first one itself (it said only
    # "no row could be read or mapped", fix "Fix the rows listed under problems", a list submit never shows).
    verdict = broken.methods["sft"]
    assert "(first: line 1 · nope: dataset_mapping fails: column 'nope' is missing" in verdict.reason, verdict.reason
    assert "listed under problems" not in (verdict.fix or "")


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    "column,role_key,content_key", [("conversations", "from", "value"), ("messages", "role", "content")]
)
def test_a_role_that_is_not_a_chat_role_is_an_error_never_guessed(
    tmp_path: Path, column: str, role_key: str, content_key: str
) -> None:
    rows = [{column: turns(("human", q), ("bot", a), role=role_key, content=content_key)} for q, a in QA]
    report = validate_dataset(_write_rows(tmp_path / "bot.jsonl", rows), method="sft")
    verdict = report.methods["sft"]
    assert verdict.status == "INCOMPATIBLE" and verdict.mapping is None
    assert "'bot'" in verdict.reason and "system, developer, user, assistant, tool" in verdict.reason
    assert '"bot": "assistant"' not in (verdict.fix or "") and "never guesses" in verdict.reason
    assert [f.severity for f in report.findings] == ["error"]


def test_messages_with_an_unknown_role_name_it_in_each_row(tmp_path: Path) -> None:
    rows = [{"messages": turns(("user", q), ("bot", a))} for q, a in QA]
    report = validate_dataset(_write_rows(tmp_path / "bot.jsonl", rows), method="sft")
    assert report.methods["sft"].status == "INCOMPATIBLE" and report.problems_total == len(QA)
    assert "'bot' is not a chat role (use system, developer, user, assistant, tool)" in report.problems[0].problem


def test_sharegpt_role_names_in_messages_are_renamed_as_the_job_renames_them(tmp_path: Path, rt: ModuleType) -> None:
    rows = [{"messages": turns(("human", q), ("assistant", a))} for q, a in QA]
    verdict = validate_dataset(_write_rows(tmp_path / "hm.jsonl", rows), method="sft").methods["sft"]
    assert verdict.status == "NEEDS_MAPPING" and "ShareGPT-style turns" not in verdict.reason
    assert "renames them (human → user)" in verdict.reason
    assert verdict.mapping is not None and verdict.mapping["roles"] == {"assistant": "assistant", "human": "user"}
    mapped = [rt.apply_mapping(row, verdict.mapping) for row in rows]  # what the job will do
    assert mapped[0]["messages"][0] == {"role": "user", "content": QA[0][0]}
    ready = validate_dataset(_write_rows(tmp_path / "mapped.jsonl", mapped), method="sft")
    assert ready.methods["sft"].status == "READY"


@pytest.mark.parametrize(
    "rows,method,problem",
    [
        ([{"question": "q", "answer": "a"}, {"answer": "a"}], "sft", "column 'question' is missing; found: 'answer'"),
        ([{"question": "q"}, {"answer": "a"}], "grpo", "column 'question' is missing; found: 'answer'"),
        ([{"prompt": "q", "completion": "a"}, {"completion": "a"}], "sft", "column 'prompt' is missing; found: "),
        ([{"instruction": "q", "output": "a"}, {"instruction": "q"}], "sft", "column 'output' is missing; found: "),
    ],
)
def test_a_missing_column_is_reported_as_missing(
    tmp_path: Path, rows: list[dict[str, Any]], method: str, problem: str
) -> None:
    report = validate_dataset(_write_rows(tmp_path / "gap.jsonl", rows), method=method)
    assert report.methods[method].status == "INCOMPATIBLE"
    assert report.problems[0].problem.startswith(problem) and report.problems[0].row == 2
    assert "dataset_mapping fails" not in report.to_markdown()


# --- mappings turn data READY ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    return ds.job_runtime()


MAPPING_CASES = [
    (shape, method)
    for shape in SHAPES
    for method, letter in zip(METHODS, shape.verdicts, strict=False)
    if letter == "N"
]


def test_every_mapping_kind_is_proposed_somewhere(reports: dict[str, DatasetReport]) -> None:
    kinds = {reports[shape.name].methods[method].mapping["kind"] for shape, method in MAPPING_CASES}  # type: ignore[index]
    assert kinds == {"rename", "sharegpt", "alpaca"} and len(MAPPING_CASES) >= 20


@pytest.mark.parametrize(("shape", "method"), MAPPING_CASES, ids=lambda x: x if isinstance(x, str) else x.name)
def test_proposed_mapping_makes_the_data_ready(
    shape: Shape, method: str, reports: dict[str, DatasetReport], rt: ModuleType, tmp_path: Path
) -> None:
    verdict = reports[shape.name].methods[method]
    rows = shape.content if shape.file.endswith((".jsonl", ".parquet")) else None
    assert rows is not None and rt.mapping_problems(verdict.mapping) == []
    mapped = [rt.apply_mapping(row, verdict.mapping) for row in rows]
    path = tmp_path / "mapped.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mapped))
    after = validate_dataset(str(path), method=method)
    assert after.methods[method].status == "READY", after.to_markdown()
    assert (
        validate_dataset(str(shape.write(tmp_path)), method=method, mapping=verdict.mapping).methods[method].status
        == "READY"
    )
    assert _run_python(verdict.python, rows) == mapped


class ListDataset:
    """Just enough of datasets.Dataset to run the Python a mapping is shown as."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]], remove_columns: list[str]) -> ListDataset:
        return ListDataset([{**{k: v for k, v in r.items() if k not in remove_columns}, **fn(r)} for r in self.rows])

    def rename_columns(self, names: dict[str, str]) -> ListDataset:
        return ListDataset([{names.get(k, k): v for k, v in r.items()} for r in self.rows])

    def remove_columns(self, names: list[str]) -> ListDataset:
        return ListDataset([{k: v for k, v in r.items() if k not in names} for r in self.rows])


def _run_python(code: str | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert code
    namespace: dict[str, Any] = {"dataset": ListDataset([dict(r) for r in rows])}
    exec(compile(code, "<mapping>", "exec"), namespace)
    return namespace["dataset"].rows


@pytest.mark.parametrize(
    ("mapping", "row", "expected"),
    [
        (
            {"kind": "rename", "columns": {"question": "prompt", "answer": "completion"}, "drop": ["id"]},
            {"question": "q", "answer": "a", "id": 3, "keep": 1},
            {"prompt": "q", "completion": "a", "keep": 1},
        ),
        ({"kind": "rename", "columns": {"a": "b", "b": "a"}}, {"a": 1, "b": 2}, {"a": 2, "b": 1}),
        (
            {"kind": "sharegpt", "column": "conversations"},  # defaults: from/value, SHAREGPT_ROLES
            {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}], "id": 1},
            {"id": 1, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
        ),
        (
            {"kind": "alpaca"},
            {"instruction": "Add", "input": "1 1", "output": "2"},
            {
                "prompt": [{"role": "user", "content": "Add\n\n1 1"}],
                "completion": [{"role": "assistant", "content": "2"}],
            },
        ),
        (
            {"kind": "alpaca", "input": None, "output": "response"},
            {"instruction": "Hi", "response": "Yo"},
            {"prompt": [{"role": "user", "content": "Hi"}], "completion": [{"role": "assistant", "content": "Yo"}]},
        ),
    ],
)
def test_apply_mapping(rt: ModuleType, mapping: dict[str, Any], row: dict[str, Any], expected: dict[str, Any]) -> None:
    assert rt.apply_mapping(row, mapping) == expected
    assert _run_python(ds.mapping_python(mapping), [row]) == [expected]


@pytest.mark.parametrize(
    ("mapping", "row", "message"),
    [
        ({"kind": "rename", "columns": {"question": "prompt"}}, {"q": 1}, "needs column(s) ['question']"),
        (
            {"kind": "rename", "columns": {"question": "prompt"}},
            {"question": 1, "prompt": 2},
            "would overwrite existing column(s) ['prompt']",
        ),
        (
            {"kind": "sharegpt", "column": "c", "roles": {"human": "user"}},
            {"c": [{"from": "bot", "value": "x"}]},
            "c[0].from is 'bot', which dataset_mapping.roles does not map",
        ),
        ({"kind": "sharegpt", "column": "c"}, {"c": [{"from": ["x"], "value": "x"}]}, "does not map"),
        ({"kind": "sharegpt", "column": "c"}, {"c": "hi"}, "must hold a list of turns"),
        ({"kind": "sharegpt", "column": "c"}, {"c": [{"from": "human"}]}, "c[0].value must be a string"),
        ({"kind": "alpaca"}, {"instruction": 1, "input": "", "output": "x"}, "'instruction' must be a string"),
        ({"kind": "nope"}, {}, "kind 'nope' is unknown"),
    ],
)
def test_apply_mapping_refuses_precisely(
    rt: ModuleType, mapping: dict[str, Any], row: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        rt.apply_mapping(row, mapping)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ([1], "must be a JSON object"),
        ({"kind": "rename"}, "renames and drops nothing"),
        ({"kind": "rename", "columns": {"a": "x", "b": "x"}}, "same new name"),
        ({"kind": "rename", "columns": {"a": "x"}, "drop": ["a"]}, "both renames and drops 'a'"),
        ({"kind": "rename", "colums": {"a": "x"}}, "key 'colums' is unknown"),
        ({"kind": "sharegpt"}, "dataset_mapping.column must be a column name"),
        ({"kind": "sharegpt", "column": "c", "roles": {"gpt": "bot"}}, "maps 'gpt' to 'bot'"),
        ({"kind": "alpaca", "input": 3}, "dataset_mapping.input must be a column name"),
        ({"kind": ["rename"]}, "kind ['rename'] is unknown"),
        ({"messages": "convos"}, 'dataset_mapping has no "kind" (one of rename, sharegpt, alpaca)'),
        ({"kind": "rename", "columns": {"a": "x"}, 1: 2}, "key 1 is unknown"),
        ({"kind": "rename", "columns": {"a": ["x"]}}, "must map old column names to new ones"),
        ({"kind": "sharegpt", "column": "c", "roles": []}, "roles must map"),
    ],
)
def test_malformed_mappings_are_refused_with_the_fix(mapping: Any, message: str, folder: Path, rt: ModuleType) -> None:
    assert any(message in p for p in rt.mapping_problems(mapping))
    with pytest.raises(InvalidRequestError) as info:
        validate_dataset(str(folder / "m.jsonl"), mapping=mapping)
    assert message in info.value.message and info.value.fix


# --- the Hub ---------------------------------------------------------------------------------------


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, folder: Path) -> dict[str, Any]:
    """A fake Hub repo served from local files (HfApi.list_repo_files / hf_hub_download patched)."""
    from huggingface_hub import HfApi

    served = {
        "README.md": None,
        "data/train-00000-of-00001.parquet": folder / "p.parquet",
        "data/test-00000-of-00001.parquet": folder / "pp.parquet",
    }
    state: dict[str, Any] = {"error": None, "downloads": []}

    def list_repo_files(self: Any, repo_id: str, *, repo_type: str | None = None, **_: Any) -> list[str]:
        assert repo_type == "dataset"
        if state["error"]:
            raise state["error"]
        return list(served)

    def hf_hub_download(self: Any, repo_id: str, filename: str, *, repo_type: str | None = None, **_: Any) -> str:
        assert repo_type == "dataset"
        state["downloads"].append(filename)
        return str(served[filename])

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(HfApi, "list_repo_files", list_repo_files)
    monkeypatch.setattr(HfApi, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr(ds.read, "_hub_unreachable", lambda endpoint: None)
    return state


def test_hub_dataset_is_read_from_its_split_file(hub: dict[str, Any]) -> None:
    report = validate_dataset("org/chat")
    assert (report.source, report.data_file, report.format, report.rows) == (
        "hub",
        "data/train-00000-of-00001.parquet",
        "messages",
        4,
    )
    assert report.methods["sft"].status == "READY" and report.findings == []
    test_split = validate_dataset("org/chat", split="test", method="dpo")
    assert test_split.methods["dpo"].status == "READY" and hub["downloads"][-1] == "data/test-00000-of-00001.parquet"
    missing = validate_dataset("org/chat", split="validation")
    assert [f.code for f in missing.findings] == ["dataset.split"] and "data/train-00000" in missing.findings[0].message


def _http_error(cls: type[Exception], status: int) -> Exception:
    response = SimpleNamespace(status_code=status, headers={}, request=None)
    return cls(f"{status} error", response=response)  # type: ignore[call-arg]


def test_hub_errors_become_findings(hub: dict[str, Any]) -> None:
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    cases = [
        (_http_error(RepositoryNotFoundError, 404), "dataset.not_found", "error"),
        (_http_error(GatedRepoError, 403), "dataset.access", "error"),
        (_http_error(HfHubHTTPError, 401), "dataset.access", "error"),
        (_http_error(HfHubHTTPError, 503), "dataset.unverified", "warning"),
        (ConnectionError("connection reset"), "dataset.unverified", "warning"),
    ]
    for error, code, severity in cases:
        hub["error"] = error
        report = validate_dataset("org/chat", method="sft")
        assert [(f.code, f.severity) for f in report.findings] == [(code, severity)], error
        assert report.methods == {} and report.findings[0].fix


def test_unreachable_hub_is_a_quick_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    started = time.monotonic()
    report = validate_dataset("org/some-dataset", method="sft")
    assert time.monotonic() - started < 10
    (finding,) = report.findings
    assert (finding.code, finding.severity) == ("dataset.unverified", "warning")
    assert f"127.0.0.1:{port}" in finding.message and "could not be checked" in finding.message and finding.fix
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE" in validate_dataset("org/some-dataset").findings[0].message


# --- bad input never crashes ------------------------------------------------------------------------


def _fuzz_files(folder: Path) -> list[Path]:
    rng = random.Random(1234)
    values: list[Any] = [
        None,
        True,
        0,
        -1.5,
        "",
        "x",
        [],
        {},
        [1, "a"],
        {"role": "user"},
        [{"from": 1}],
        [[[]]],
        [{"role": None, "content": 5}],
        [{"role": "assistant", "content": {"a": 1}}],
    ]
    columns = [
        "messages",
        "text",
        "prompt",
        "completion",
        "chosen",
        "rejected",
        "label",
        "conversations",
        "instruction",
        "output",
        "question",
        "answer",
        "good",
        "bad",
    ]
    files = []
    for i in range(6):
        junk = folder / f"junk{i}"
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
        for suffix in (".jsonl", ".json", ".csv", ".parquet"):
            path = junk.with_suffix(suffix)
            path.write_bytes(blob)
            files.append(path)
    for i in range(12):
        lines = []
        for _ in range(rng.randrange(1, 12)):
            row = {rng.choice(columns): rng.choice(values) for _ in range(rng.randrange(0, 4))}
            lines.append(json.dumps(row if rng.random() < 0.85 else rng.choice(values)))
        path = folder / f"typed{i}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    huge = folder / "huge.jsonl"
    huge.write_text(json.dumps({"text": "x" * 3_000_000}) + "\n" + "[" * 100_000 + "\n")
    deep = folder / "deep.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    csv_quote = folder / "quote.csv"
    csv_quote.write_text('text\n"unterminated\n')
    return [*files, huge, deep, csv_quote]


def test_malformed_files_never_raise(tmp_path: Path) -> None:
    for path in _fuzz_files(tmp_path):
        for method in (None, "sft", "kto"):
            report = validate_dataset(str(path), method=method)
            report.to_markdown()
            json.loads(report.model_dump_json())
            if not report.methods:  # nothing read: a finding must say why
                assert any(f.severity == "error" for f in report.findings), path
    huge = validate_dataset(str(tmp_path / "huge.jsonl"))
    assert len(huge.samples[0]["text"]) < 300 and "chars)" in huge.samples[0]["text"]
    assert any(p.row == 2 and "nested too deeply" in p.problem for p in huge.problems)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"method": "ppo"},
        {"method": 3},
        {"max_length": 0},
        {"max_length": -5},
        {"max_length": "512"},
        {"max_length": True},
        {"max_rows": 0},
        {"split": ""},
        {"split": None},
        {"mapping": "rename"},
    ],
)
def test_bad_arguments_raise_invalid_request_with_a_fix(folder: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError) as info:
        validate_dataset(str(folder / "m.jsonl"), **kwargs)
    assert info.value.fix


@pytest.mark.parametrize("dataset", ["", "   ", None, 42])
def test_bad_dataset_reference_raises_invalid_request(dataset: Any) -> None:
    with pytest.raises(InvalidRequestError):
        validate_dataset(dataset)


def test_unknown_method_names_the_methods() -> None:
    with pytest.raises(InvalidRequestError) as info:
        validate_dataset("data.jsonl", method="ppo")
    assert "'ppo'" in info.value.message and "sft, dpo, grpo, reward, kto" in (info.value.fix or "")


def test_every_registered_method_has_a_shape_planner() -> None:
    assert set(PLANNERS) == set(METHODS)


def test_import_pulls_in_no_heavy_library() -> None:
    heavy = ("torch", "transformers", "trl", "datasets", "pyarrow", "huggingface_hub")
    code = f"import sys, jobtrail.preflight.dataset; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""


# --- token lengths (in a subprocess: the test process never imports transformers) ------------------

_VALIDATE_MANY = (
    "import sys, json; from jobtrail.preflight.dataset import validate_dataset; "
    "print(json.dumps([validate_dataset(**kw).model_dump(mode='json') for kw in json.loads(sys.argv[1])]))"
)


def _validate_in_subprocess(env: dict[str, str], *calls: dict[str, Any]) -> list[DatasetReport]:
    out = subprocess.run(
        [sys.executable, "-c", _VALIDATE_MANY, json.dumps(calls)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [DatasetReport.model_validate(r) for r in json.loads(out.stdout.strip().splitlines()[-1])]


def test_token_length_stats(tiny_model: Path, job_env: dict[str, str], tmp_path: Path, folder: Path) -> None:
    chat = write_chat_dataset(tmp_path / "chat.jsonl", rows=40)
    model = str(tiny_model)
    chat_report, sharegpt, text, grpo, no_model = _validate_in_subprocess(
        job_env,
        {"dataset": str(chat), "method": "sft", "model": model, "max_length": 12},
        {"dataset": str(folder / "sg.jsonl"), "model": model},  # measured after its mapping
        {"dataset": str(folder / "t.jsonl"), "model": model, "max_length": 1000},
        {"dataset": str(folder / "poc.jsonl"), "method": "grpo", "model": model},  # the prompt alone
        {"dataset": str(chat), "model": str(tmp_path / "no-model")},
    )
    stats = chat_report.token_lengths
    assert stats is not None, chat_report.to_markdown()
    assert stats.rows == 40 and stats.chat_template and stats.tokenizer == model
    assert 0 < stats.p50 <= stats.p90 <= stats.p95 <= stats.p99 <= stats.max
    # ChatML adds <|im_start|>role ... <|im_end|> around each turn: well over the bare text.
    assert stats.p50 > 12 and stats.over_max_length == 40 and stats.max_length == 12
    assert "dataset.too_long" in {f.code for f in chat_report.findings}
    assert "Token lengths (chat-templated" in chat_report.to_markdown()

    assert sharegpt.token_lengths and sharegpt.token_lengths.chat_template and sharegpt.token_lengths.rows == 4
    assert sharegpt.token_lengths.over_max_length is None  # no max_length given
    assert text.token_lengths and not text.token_lengths.chat_template and text.token_lengths.over_max_length == 0
    assert grpo.token_lengths and grpo.token_lengths.max < stats.p50  # a short prompt, no answer
    assert no_model.token_lengths is None
    assert [(f.code, f.severity) for f in no_model.findings] == [("dataset.tokens", "warning")]


# --- real SFT runs with each mapping kind -------------------------------------------------------------


def _mapped_job(workdir: Path, model: Path, data: Path, mapping: dict[str, Any]) -> Path:
    spec = JobSpec(
        method="sft",
        model=str(model),
        dataset=str(data),
        hyperparameters={
            "max_steps": 2,
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 1,
            "max_length": 64,
            "save_steps": 2,
            "logging_steps": 1,
            "lora_r": 4,
            "lora_alpha": 8,
        },
    )
    config = build_config(spec, job_values(spec), str(workdir / "out"))
    config["dataset"]["mapping"] = mapping
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "job.py"
    script.write_text(render_script("sft", config))
    return script


def _toy_rows(tmp_path: Path) -> list[tuple[str, str]]:
    source = write_prompt_completion_dataset(tmp_path / "pc.jsonl", rows=16)
    return [(r["prompt"], r["completion"].strip()) for r in map(json.loads, source.read_text().splitlines())]


def test_sft_trains_with_each_mapping_kind(tmp_path: Path, tiny_model: Path, job_env: dict[str, str]) -> None:
    pairs = _toy_rows(tmp_path)
    shapes = {
        "sharegpt": [
            {"conversations": turns(("human", q), ("gpt", a), role="from", content="value")} for q, a in pairs
        ],
        "alpaca": [{"instruction": q, "input": "", "output": a} for q, a in pairs],
        "question_answer": [{"question": q, "answer": " " + a} for q, a in pairs],
    }
    jobs = []
    for name, rows in shapes.items():
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        verdict = validate_dataset(str(data), method="sft").methods["sft"]
        assert verdict.status == "NEEDS_MAPPING" and verdict.mapping
        jobs.append((name, verdict.mapping, _mapped_job(tmp_path / name, tiny_model, data, verdict.mapping)))
    # A mapping naming a column the data lacks ends the job as bad input, before any training.
    broken = {"kind": "rename", "columns": {"nope": "prompt"}}
    jobs.append(("broken", broken, _mapped_job(tmp_path / "broken", tiny_model, tmp_path / "alpaca.jsonl", broken)))
    runs = run_jobs(*((script, job_env) for _, _, script in jobs))
    for (name, mapping, _), run in zip(jobs, runs, strict=True):
        events, stderr = run.events, run.stderr
        termination = events[-1] if events else {}
        manifest = next((e for e in events if e["event"] == "data_manifest"), None)
        if name == "broken":
            assert termination.get("reason") == "bad_input" and "'nope'" in termination["message"], stderr[-2000:]
            continue
        assert run.returncode == 0 and termination.get("reason") == "succeeded", f"{name}:\n{stderr[-3000:]}"
        assert manifest and manifest["mapping"] == mapping and manifest["rows"] == 16
        expected = "messages" if name == "sharegpt" else "prompt_completion"
        assert manifest["format"] == expected
        assert [e["step"] for e in events if e["event"] == "step"] == [1, 2]


def test_max_length_advice_never_goes_past_the_models_positions(tiny_model: Path) -> None:
    """A model with 512 positions: 'raise max_length to about 756' would be refused by submit."""
    from jobtrail.preflight.dataset.read import model_positions
    from jobtrail.preflight.dataset.tokens import _too_long_fix

    assert model_positions(str(tiny_model)) == 512
    below = _too_long_fix(p99=756, max_length=256, positions=512)
    assert "Raise max_length to 512" in below and "756" not in below and "filter" in below
    at_limit = _too_long_fix(p99=756, max_length=512, positions=512)
    assert "Raise" not in at_limit and "model's limit (512" in at_limit
    assert (
        _too_long_fix(p99=300, max_length=256, positions=512) == "Raise max_length to about 300, or shorten those rows."
    )
