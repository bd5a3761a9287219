"""Malformed arguments and files thrown at every tool: structured answers, never a traceback, nothing lost."""

from __future__ import annotations

import random

import anyio
from mcp import Client

from jobtrail.app import build_service
from jobtrail.surface.server import build_server

JUNK_VALUES = [
    None,
    "",
    " ",
    -1,
    0,
    10**12,
    3.7,
    True,
    [],
    {},
    ["x"],
    {"a": {"b": [1]}},
    "x" * 20000,
    "../../etc/passwd",
    "jt-\u0000nul",
    "💥" * 50,
    "/dev/null",
    "org/",
    "a/b/c/d",
]


def _files(tmp_path):
    (tmp_path / "binary.jsonl").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "nested.json").write_text('{"data": {"rows": [1, 2, {"x": [null]}]}}')
    (tmp_path / "bad.csv").write_text('a,b\n"1,2\n3')
    (tmp_path / "fake.parquet").write_bytes(b"PAR1 not really")
    (tmp_path / "dir.jsonl").mkdir()
    return [str(p) for p in tmp_path.iterdir()]


def _skeleton(tool: str, paths, rng) -> dict:
    """Arguments that pass the schema, so the junk reaches the service, not only the SDK's validation."""
    strings = [p for p in paths] + ["org/name", "", "jt-" + "z" * 8, "💥"]
    if tool == "submit":
        return {"method": "sft", "model": rng.choice(strings), "dataset": rng.choice(strings)}
    if tool == "validate_dataset":
        return {"dataset": rng.choice(strings)}
    if tool in ("inspect", "logs", "cancel", "retry", "wait", "metrics", "plot"):
        return {"job_id": rng.choice(strings)}
    return {}


def _argument_sets(tools, paths, rng):
    for tool in tools:
        props = tool.input_schema.get("properties", {})
        names = list(props)
        for i in range(40):
            args = _skeleton(tool.name, paths, rng) if i % 2 else {}
            for name in rng.sample(names, k=rng.randint(0, min(3, len(names)))):
                args[name] = rng.choice(JUNK_VALUES + paths)
            yield tool.name, args
        yield tool.name, {"not_an_argument": 1}


def test_every_tool_answers_malformed_input_with_a_structured_error(
    tmp_path, monkeypatch, tiny_model, chat_dataset, hub
):
    # Hub ids among the junk reach the offline emulator (the `hub` fixture), never the network.
    # (HF_HUB_OFFLINE is read once when huggingface_hub is imported: setting it here would leak.)
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    service = build_service()
    server = build_server(service)
    paths = [*_files(tmp_path), str(tiny_model), str(chat_dataset)]
    rng = random.Random(1234)

    async def go():
        answered = 0
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            for name, args in _argument_sets(tools, paths, rng):
                if name == "submit":
                    args["dry_run"] = True  # junk must not start real jobs
                if name == "cancel":
                    args.setdefault("job_id", "jt-nothere0")
                result = await client.call_tool(name, args)
                text = " ".join(getattr(c, "text", "") for c in result.content)
                assert "Traceback" not in text, (name, args, text[:500])
                # The SDK words both schema refusals and crashes "Error executing tool X"; a crash says
                # nothing more, a refusal names the argument and what it should be.
                assert text.strip() != f"Error executing tool {name}", ("an unanticipated crash", name, args)
                if not result.is_error:
                    assert result.structured_content is not None, (name, args)
                answered += 1
            # Still healthy afterwards, and nothing was created by junk.
            listed = await client.call_tool("ps", {})
            return answered, listed

    answered, listed = anyio.run(go)
    assert answered > 300
    assert listed.structured_content["jobs"] == []
