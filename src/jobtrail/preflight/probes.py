"""Facts preflight needs from outside the process (files, the Hub, the job's Python), gathered
here so the rules (rules.py) stay pure. huggingface_hub is imported only when a Hub id is
probed, so the server starts without it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from jobtrail.outcomes.evals import HubWeights
from jobtrail.templates import pep723
from jobtrail.templates.configs import COMMIT_MARKER, REMOTE_CHECKPOINT
from jobtrail.templates.render import job_requirements, scripts_dir
from jobtrail.templates.versions import environment_lock, job_lock, same_release
from jobtrail.util.data import read_json_object
from jobtrail.util.hub import hub_unreachable
from jobtrail.util.refs import looks_local

Access = Literal["ok", "gated", "not_found", "unverified"]
_HEADER_LIMIT = 100 * 1024 * 1024  # a safetensors header larger than this is not one


class ModelFacts(BaseModel):
    """What could be learned about a model without downloading its weights."""

    ref: str
    local: bool
    access: Access
    detail: str | None = None  # why access is not "ok", in words
    config: dict[str, Any] | None = None
    has_chat_template: bool | None = None
    module_names: list[str] | None = None  # leaf module names (q_proj, ...) from the weight names
    module_paths: list[str] | None = None  # the modules holding weights ('model.layers.0.self_attn.q_proj')
    adapter_of: str | None = None  # a LoRA adapter directory: its base model (the facts above are the base's)
    cached: bool | None = None  # an unreachable Hub model: whether this machine's HF cache holds its config

    @property
    def text_config(self) -> dict[str, Any]:
        """The language model's numbers: multimodal configs (Gemma 3, ...) keep them in text_config."""
        config = self.config or {}
        text = config.get("text_config")
        return {**config, **text} if isinstance(text, dict) else config

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model takes, when its config says."""
        positions = self.text_config.get("max_position_embeddings")
        return positions if isinstance(positions, int) and positions > 0 else None


class HubIdentity(BaseModel):
    """Who a token belongs to and what it may do, from whoami; `error` when it could not be asked."""

    name: str | None = None
    role: str | None = None  # "write", "read" or "fineGrained"
    can_write_repos: bool | None = None  # None: a fine-grained token whose scopes were not listed
    # A fine-grained token's permissions by namespace (its user, or an org): what it may do where.
    scopes: dict[str, list[str]] = Field(default_factory=dict)
    # The organizations its user belongs to, with the user's role in each (roleInOrg: read, contributor, write, admin).
    orgs: dict[str, str | None] = Field(default_factory=dict)
    error: str | None = None
    status: int | None = None  # HTTP status of the failure, when there was one


def hub_identity(token: str) -> HubIdentity:
    from huggingface_hub import HfApi

    unreachable = hub_unreachable()
    if unreachable:
        return HubIdentity(error=unreachable)
    try:
        info = HfApi(token=token).whoami(token=token)
    except Exception as exc:  # noqa: BLE001 - reported as a finding, never raised
        response = getattr(exc, "response", None)
        return HubIdentity(error=_one_line(exc), status=getattr(response, "status_code", None))
    access = (info.get("auth") or {}).get("accessToken") or {}
    role = access.get("role")
    scoped = (access.get("fineGrained") or {}).get("scoped") or []
    scopes = {
        str(entry["entity"]["name"]): list(entry.get("permissions") or []) for entry in scoped if entry.get("entity")
    }
    orgs = {str(org["name"]): org.get("roleInOrg") for org in info.get("orgs") or [] if org.get("name")}
    return HubIdentity(
        name=info.get("name"), role=role, can_write_repos=_can_write(role, access), scopes=scopes, orgs=orgs
    )


class SpaceFacts(BaseModel):
    """A Hugging Face Space as its page tells: whether it exists, whether trackio made it, who sees it."""

    space_id: str
    exists: bool | None = None  # None: it could not be asked (`error` says why)
    trackio: bool | None = None  # its card's tags name trackio (trackio deploys its app with that tag)
    private: bool | None = None
    error: str | None = None


def space_facts(space_id: str, token: str | None) -> SpaceFacts:
    """What the Hub says of `space_id`; never creates it."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    unreachable = hub_unreachable()
    if unreachable:
        return SpaceFacts(space_id=space_id, error=unreachable)
    try:
        info = HfApi(token=token).space_info(space_id)
    except RepositoryNotFoundError:
        return SpaceFacts(space_id=space_id, exists=False)
    except Exception as exc:  # noqa: BLE001 - reported as a finding, never raised
        return SpaceFacts(space_id=space_id, error=_one_line(exc))
    return SpaceFacts(space_id=space_id, exists=True, trackio="trackio" in (info.tags or []), private=info.private)


class PushedModelFacts(BaseModel):
    """What a remote job pushed to its Hub repo, at one commit: its final model at the root, its newest
    committed checkpoint in REMOTE_CHECKPOINT. An evaluation of it reads `revision`, the commit looked at."""

    job_id: str  # the remote job that pushed it
    repo_id: str
    subfolder: str | None = None  # what is read: the final model (None) or the REMOTE_CHECKPOINT folder
    wanted_step: int | None = None  # the checkpoint asked for (checkpoint-N): the folder must hold that step
    access: Access
    detail: str | None = None  # why access is not "ok", in words
    revision: str | None = None
    has_final: bool = False  # the root holds a model (adapter_config.json or config.json)
    checkpoint_step: int | None = None  # the step its committed checkpoint's marker names, when it holds one

    @property
    def where(self) -> str:
        at = f" at commit {self.revision[:12]}" if self.revision else ""
        return f"{self.repo_id}/{self.subfolder}{at}" if self.subfolder else f"{self.repo_id}{at}"


def pushed_model_facts(repo_id: str, hub: HubWeights, wanted_step: int | None, token: str | None) -> PushedModelFacts:
    """What `repo_id` holds at `hub.revision` (None: its head) of job `hub.job_id`'s final model and checkpoint."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    revision = hub.revision
    asked = PushedModelFacts(
        job_id=hub.job_id, repo_id=repo_id, subfolder=hub.subfolder, wanted_step=wanted_step, access="unverified"
    )
    unreachable = hub_unreachable()
    if unreachable:
        return asked.model_copy(update={"detail": unreachable})
    marker = f"{REMOTE_CHECKPOINT}/{COMMIT_MARKER}"
    try:
        info = HfApi(token=token).model_info(repo_id, revision=revision)
        files = {sibling.rfilename for sibling in info.siblings or []}
        committed = {}
        if marker in files:
            committed = read_json_object(Path(hf_hub_download(repo_id, marker, revision=info.sha, token=token))) or {}
    except RevisionNotFoundError:
        return asked.model_copy(update={"access": "not_found", "detail": f"the repo has no commit {revision}"})
    except (RepositoryNotFoundError, GatedRepoError):
        return asked.model_copy(update={"access": "not_found", "detail": "no such repo, or this token cannot read it"})
    except Exception as exc:  # noqa: BLE001 - reported as a finding, never raised
        return asked.model_copy(update={"detail": _one_line(exc)})
    return asked.model_copy(
        update={
            "access": "ok",
            "revision": info.sha,
            "has_final": bool({"adapter_config.json", "config.json"} & files),
            "checkpoint_step": step if isinstance(step := committed.get("step"), int) else None,
        }
    )


def _can_write(role: str | None, access: dict[str, Any]) -> bool | None:
    if role == "write":
        return True
    if role == "read":
        return False
    scoped = access.get("fineGrained", {}).get("scoped") or []
    permissions = {p for entry in scoped for p in entry.get("permissions", [])}
    if not scoped:
        return None
    return "repo.write" in permissions or "repo.content.write" in permissions


@dataclass(frozen=True)
class UntestedVersion:
    name: str
    installed: str
    tested: str

    def __str__(self) -> str:
        return f"{self.name} {self.installed} (tested: {self.tested})"


# What speedups (preflight/speedups.py) ask of a local job's Python beyond the template's dependencies: Liger's
# kernels, and the Triton they and flex attention compile with. Asked in the same run of that interpreter.
SPEED_PACKAGES = ("liger-kernel", "triton")


@dataclass(frozen=True)
class JobInterpreter:
    """A job's interpreter judged against the job's dependencies, before its script is rendered."""

    missing: list[str]  # what it lacks, e.g. "trl>=1.16 (not installed)"
    untested: list[UntestedVersion]  # dependencies it has at other versions than jobtrail tested
    packages: dict[str, str]  # canonical name -> version: the dependencies it has, and the SPEED_PACKAGES it has


def job_interpreter(
    template: str, python: str, *, qlora: bool = False, training_args: dict[str, Any] | None = None
) -> JobInterpreter:
    """The interpreter `python` for a job's dependencies: what it lacks of the template's PEP 723 header (whose
    lower bounds are the API the template is written against; rendering adds what the job's peft and
    training_args need and drops what they do without: render.job_requirements), which of the packages it has
    are not the versions jobtrail tested (the tested lock's, this machine's Python; else the job lock's, GPU-only
    packages), and the versions it has, SPEED_PACKAGES included.

    Raises BackendError when `python` cannot be run at all.
    """
    header = pep723.read_metadata((scripts_dir() / f"{template}.py").read_text(encoding="utf-8"))
    needed = job_requirements(header.get("dependencies", []), "qlora" if qlora else None, training_args or {})
    named = {canonicalize_name(Requirement(r).name) for r in needed}
    optional = [name for name in SPEED_PACKAGES if name not in named]
    check = pep723.check_interpreter([*needed, *optional], python)
    untested = []
    for name, version in sorted(check.installed.items()):
        tested = environment_lock().version_of(name) or job_lock().version_of(name)
        if name in named and tested is not None and not same_release(version, tested):
            untested.append(UntestedVersion(name, version, tested))
    # A bare name is missing only as "<name> (not installed)": the optional ones are no requirement.
    missing = [m for m in check.missing if m.split(" (", 1)[0] not in optional]
    return JobInterpreter(missing=missing, untested=untested, packages=dict(check.installed))


def c_compiler() -> bool:
    """Whether Triton finds a C compiler on this machine, as it looks for one (triton/runtime/build.py: CC, else
    gcc or clang on PATH): it builds each kernel's launcher with it, so a local job's first Triton kernel fails
    without."""
    return bool(os.environ.get("CC")) or any(shutil.which(name) for name in ("gcc", "clang"))


def model_facts(ref: str, token: str | None = None) -> ModelFacts:
    """A local model directory's facts, or a Hub model's."""
    if looks_local(ref):
        return local_model_facts(Path(ref).expanduser())
    return hub_model_facts(ref, token)


def local_model_facts(path: Path) -> ModelFacts:
    ref = str(path)
    if not path.is_dir():
        return ModelFacts(ref=ref, local=True, access="not_found", detail="no such directory")
    config = read_json_object(path / "config.json")
    if config is None and (path / "adapter_config.json").is_file():
        return _adapter_facts(path)
    if config is None:
        return ModelFacts(ref=ref, local=True, access="not_found", detail="no readable config.json")
    names, paths = _modules(_local_weight_names(path))
    return ModelFacts(
        ref=ref,
        local=True,
        access="ok",
        config=config,
        has_chat_template=_has_chat_template(path),
        module_names=names,
        module_paths=paths,
    )


def _adapter_facts(path: Path) -> ModelFacts:
    """A LoRA adapter directory (a job's output/final): its base model's facts, as the job loads base + adapter."""
    base = (read_json_object(path / "adapter_config.json") or {}).get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        detail = "adapter_config.json names no base_model_name_or_path"
        return ModelFacts(ref=str(path), local=True, access="not_found", detail=detail)
    facts = local_model_facts(Path(base)) if looks_local(base) else hub_model_facts(base)
    chat_template = _has_chat_template(path) or facts.has_chat_template  # the job saved its tokenizer beside it
    update = {"ref": str(path), "local": True, "adapter_of": base, "has_chat_template": chat_template}
    if facts.detail:
        update["detail"] = f"the adapter's base model {base}: {facts.detail}"
    return facts.model_copy(update=update)


def hub_model_facts(repo_id: str, token: str | None = None) -> ModelFacts:
    """Access, config and module names of a Hub model, through huggingface_hub only."""
    from huggingface_hub import HfApi, hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    unreachable = hub_unreachable()  # one quick request: the download below retries for ~25 s
    if unreachable:
        cached = isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
        return ModelFacts(ref=repo_id, local=False, access="unverified", detail=unreachable, cached=cached)
    api = HfApi(token=token)
    try:
        # auth_check, not model_info: gated repos show their metadata to anyone.
        api.auth_check(repo_id, token=token)
        config = read_json_object(Path(hf_hub_download(repo_id, "config.json", token=token)))
    except GatedRepoError:
        return ModelFacts(
            ref=repo_id, local=False, access="gated", detail="the repo is gated and this token has no access"
        )
    except RepositoryNotFoundError:
        return ModelFacts(
            ref=repo_id, local=False, access="not_found", detail="no such repo, or it is private to others"
        )
    except (HfHubHTTPError, OSError, ValueError) as exc:
        return ModelFacts(ref=repo_id, local=False, access="unverified", detail=_one_line(exc))
    except Exception as exc:  # noqa: BLE001 - transport errors come from whichever HTTP client huggingface_hub uses
        return ModelFacts(ref=repo_id, local=False, access="unverified", detail=_one_line(exc))
    names, paths = _modules(_hub_weight_names(api, repo_id))
    return ModelFacts(
        ref=repo_id,
        local=False,
        access="ok",
        config=config,
        has_chat_template=_hub_has_chat_template(repo_id, token),
        module_names=names,
        module_paths=paths,
    )


def _has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    tokenizer_config = read_json_object(path / "tokenizer_config.json") or {}
    return bool(tokenizer_config.get("chat_template"))


def _hub_has_chat_template(repo_id: str, token: str | None) -> bool | None:
    from huggingface_hub import HfApi, hf_hub_download

    try:
        files = set(HfApi(token=token).list_repo_files(repo_id))
        if {"chat_template.jinja", "chat_template.json"} & files:
            return True
        if "tokenizer_config.json" not in files:
            return False
        config = read_json_object(Path(hf_hub_download(repo_id, "tokenizer_config.json", token=token))) or {}
    except Exception:  # noqa: BLE001 - an unknown answer is reported as None, never a crash
        return None
    return bool(config.get("chat_template"))


def _local_weight_names(path: Path) -> list[str] | None:
    index = read_json_object(path / "model.safetensors.index.json")
    if index and isinstance(index.get("weight_map"), dict):
        return [str(name) for name in index["weight_map"]]
    names: list[str] = []
    for shard in sorted(path.glob("*.safetensors")):
        header = _safetensors_header(shard)
        if header is None:
            return None
        names.extend(k for k in header if k != "__metadata__")
    return names or None


def _hub_weight_names(api: Any, repo_id: str) -> list[str] | None:
    try:
        meta = api.get_safetensors_metadata(repo_id)
    except Exception:  # noqa: BLE001 - not a safetensors repo, or unreachable: unknown
        return None
    return [str(name) for name in meta.weight_map]


def _safetensors_header(path: Path) -> dict[str, Any] | None:
    # The format is an 8-byte little-endian length, then that many bytes of JSON: reading it
    # by hand avoids importing torch (or safetensors) into the server just to list names.
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > _HEADER_LIMIT:
                return None
            header: dict[str, Any] = json.loads(f.read(length))
            return header
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError):
        return None


def _modules(weight_names: list[str] | None) -> tuple[list[str] | None, list[str] | None]:
    """(module_names, module_paths) from the weight names: 'model.layers.0.self_attn.q_proj.weight' is held by the
    module 'model.layers.0.self_attn.q_proj', whose name is 'q_proj'."""
    if weight_names is None:
        return None, None
    paths = sorted({name.rsplit(".", 1)[0] for name in weight_names if "." in name})
    return sorted({path.rsplit(".", 1)[-1] for path in paths}), paths


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
