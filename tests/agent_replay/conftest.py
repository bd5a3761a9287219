"""The scenarios' world: one jobtrail service (host agent-world, two local slots) on the session's tiny model and
chat data, and the portal the agents' MCP sessions run on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from anyio.from_thread import start_blocking_portal
from replay_harness import TINY, WORLD_HOST, Jobs, World

from jobtrail.app import service_of, settings
from support.jobs import LLAMA_CPP_CACHE


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, chat_dataset: Path) -> Iterator[World]:
    root = tmp_path_factory.mktemp("agent-replay")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JOBTRAIL_LLAMA_CPP_CACHE", str(LLAMA_CPP_CACHE.parent))  # llama.cpp built once per machine
        # Two local slots: the tiny jobs are mostly imports on one core, and two run side by side on two.
        service = service_of(replace(settings(root / "home"), host_id=WORLD_HOST, max_concurrent=2))
        with start_blocking_portal() as portal:
            world = World(service, portal, tiny_model, chat_dataset, root)
            try:
                yield world
            finally:
                world.close()


@pytest.fixture(scope="session", autouse=True)
def pipeline(world: World, tmp_path_factory: pytest.TempPathFactory) -> Jobs:
    """The real jobs the scenarios share, submitted through an agent's MCP session as soon as the suite starts (the
    other scenarios run while they train): an SFT job with a smoke run and held-out data (a base and a final
    evaluation), a GGUF conversion and an evaluation chained after it; a job forced onto broken data (bad_input)
    with a follower, which is cancelled when it fails."""
    data = tmp_path_factory.mktemp("agent-data")
    broken = data / "broken.jsonl"
    broken.write_text(
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n{oops\n' * 8
    )
    agent = world.agent()
    model, dataset = str(world.model), str(world.dataset)
    trained = agent.call(
        "submit", method="sft", model=model, dataset=dataset, hyperparameters=TINY, smoke_steps=2, eval_dataset=dataset
    )
    converted = agent.call("convert_gguf", source=trained["job_id"], quantizations=["Q8_0"], after=trained["job_id"])
    evaluated = agent.call("evaluate", job_id=trained["job_id"], dataset=dataset, after=trained["job_id"])
    failing = agent.call("submit", method="sft", model=model, dataset=str(broken), hyperparameters=TINY, force=True)
    follower = agent.call("submit", method="sft", model=failing["job_id"], dataset=dataset, hyperparameters=TINY)
    jobs = Jobs(
        trained=trained["job_id"],
        converted=converted["job_id"],
        evaluated=evaluated["job_id"],
        failing=failing["job_id"],
        follower=follower["job_id"],
        submitted=agent,
    )
    assert all(vars(jobs).values()), [r.summary for r in agent.replies]
    return jobs
