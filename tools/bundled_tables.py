"""The bundled tables in src/jobtrail/data/, derived from the packages they describe.

    python tools/bundled_tables.py write [--llama-cpp VERSION]   regenerate them from what is installed
    python tools/bundled_tables.py diff  [--llama-cpp VERSION]   say what regenerating would change

- trl_config_types.json: every TRL config field of every method, the kinds of value it takes, its choices and
  default (from the installed TRL and transformers);
- transformers_architectures.json: the model types transformers knows, and those with a causal LM head;
- lora_modules.json: the names of the modules LoRA can adapt, by causal-LM model type (built on the meta device);
- gguf_converter.json: what llama.cpp's converter and quantizer accept, read from llama-cpp-python's sdist
  (VERSION; default: the job lock's) by the conversion job's own parser.

The server reads the tables without importing torch, transformers or TRL. `make lock` writes them after it
moved the versions; the tests (tests/templates/test_units.py, tests/preflight, tests/scripts/test_gguf.py)
hold them to the lock. Needs the venv's packages (jobtrail[train,gguf]).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import json
import re
import subprocess
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

from jobtrail.methods import METHODS
from jobtrail.methods.hyperparameters import TYPES_TABLE
from jobtrail.methods.registry import method_spec
from jobtrail.preflight.architectures import LORA_MODULES_TABLE
from jobtrail.templates.llama_cpp import FACTS_FILE, LLAMA_CPP_PYTHON_VERSION, derive_converter_facts
from jobtrail.util.data import data_path

ARCHITECTURES_TABLE = "transformers_architectures.json"
_CHOICES_SENTENCE = re.compile(r"(?:Possible values are|Supported values are|Must be one of):?\s*(.+?)\.(?:\s|$)", re.S)
_QUOTED = re.compile(r"[`']+([\w-]+)[`']+")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["write", "diff"])
    parser.add_argument("--llama-cpp", default=LLAMA_CPP_PYTHON_VERSION, help="llama-cpp-python's version")
    args = parser.parse_args()
    sdist = llama_cpp_sdist(args.llama_cpp, Path(tempfile.mkdtemp()))
    derived = {
        TYPES_TABLE: json.dumps(derive_trl_config_types(), indent=1, sort_keys=True) + "\n",
        ARCHITECTURES_TABLE: architectures_json(derive_architectures()),
        LORA_MODULES_TABLE: json.dumps(derive_lora_modules(), indent=0, sort_keys=True) + "\n",
        FACTS_FILE.name: converter_json(derive_converter_facts(sdist)),
    }
    for name, text in derived.items():
        path = data_path(name)
        if args.action == "write":
            path.write_text(text)
            print(f"wrote {name}")
        else:
            print(f"{name}: {describe_change(json.loads(path.read_text()), json.loads(text))}")
    return 0


# --- TRL's config fields -------------------------------------------------------------------------------------


def derive_trl_config_types() -> dict[str, Any]:
    """Every TRL config field of every method with the kinds of value it takes, its choices (enums, Literals, the
    field's own "choices" metadata; report_to from transformers' integrations) and its default."""
    import transformers
    import trl
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    table: dict[str, Any] = {"trl_version": trl.__version__, "transformers_version": transformers.__version__}
    for method in METHODS:
        fields: dict[str, Any] = {}
        config_class = getattr(trl, method_spec(method).config_class)
        post_init = inspect.getsource(config_class.__post_init__)
        for f in dataclasses.fields(config_class):
            if not f.init or f.name.startswith("_"):
                continue
            kinds, choices = _kinds(f.type)
            choices = list(f.metadata.get("choices") or choices or _choices_in_help(f.metadata.get("help", "")))
            if kinds == ["list"] and f"isinstance(self.{f.name}, str)" in post_init:
                kinds = ["list", "str"]  # one name stands for a list of one (DPO's loss_type)
            if f.name == "report_to":
                choices = ["all", "none", *sorted(INTEGRATION_TO_CALLBACK)]
            entry: dict[str, Any] = {"kinds": kinds}
            if choices:
                entry["choices"] = choices
            default = f.default.value if isinstance(f.default, enum.Enum) else f.default
            if default is None or isinstance(default, bool | int | float | str):
                entry["default"] = default
            fields[f.name] = entry
        table[method] = fields
    return table


def _kinds(annotation: Any) -> tuple[list[str], list[Any]]:
    """The JSON kinds a dataclass field's annotation admits, and the choices its enums or Literals name."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds: list[str] = []
        choices: list[Any] = []
        for arg in typing.get_args(annotation):
            more, named = _kinds(arg)
            kinds += [kind for kind in more if kind not in kinds]
            choices += named
        return kinds, choices
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        strings = all(isinstance(v, str) for v in values)
        return sorted({"null" if v is None else type(v).__name__ for v in values}), list(values) if strings else []
    if annotation is type(None):
        return ["null"], []
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return ["str"], [member.value for member in annotation]
    simple = {bool: "bool", int: "int", float: "float", str: "str", list: "list", tuple: "list", dict: "dict"}
    return [simple.get(origin or annotation, "any")], []


def _choices_in_help(text: str) -> list[str]:
    """The values a TRL field's help lists in one sentence ("Supported values are 'grpo', 'dapo', ... and
    'vespo'."), where its annotation is a plain str; none where the help describes each."""
    found = _CHOICES_SENTENCE.search(text)
    if not found or re.sub(r",|\band\b|\bor\b|\s", "", _QUOTED.sub("", found.group(1))):
        return []
    return _QUOTED.findall(found.group(1))


# --- transformers' model types -------------------------------------------------------------------------------


def derive_architectures() -> dict[str, Any]:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return {
        "transformers_version": transformers.__version__,
        "model_types": sorted(CONFIG_MAPPING_NAMES),
        "causal_lm_model_types": sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
    }


def derive_lora_modules(model_types: list[str] | None = None) -> dict[str, Any]:
    """The names of the modules LoRA can adapt of each causal-LM model type (or of `model_types`): its linear
    layers (Linear, transformers' Conv1D) and its embeddings, from the model built with its config's defaults on
    the meta device (no weights; about 20 s for all of them). A type whose default config does not build (it needs
    arguments or packages that are not here) is left out: preflight then says it could not check the names."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.pytorch_utils import Conv1D
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    kinds = {"linear": (torch.nn.Linear, Conv1D), "embedding": (torch.nn.Embedding,)}
    modules: dict[str, dict[str, list[str]]] = {}
    for model_type in model_types or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type))
        except Exception:  # noqa: BLE001 - a default config that does not build: the type is left out
            continue
        named = list(model.named_modules())
        modules[model_type] = {
            kind: sorted({name.rsplit(".", 1)[-1] for name, module in named if isinstance(module, classes)})
            for kind, classes in kinds.items()
        }
    return {"transformers_version": transformers.__version__, "modules": modules}


def architectures_json(table: dict[str, Any]) -> str:
    """One name a line, as the file has always been written (a refresh's diff shows the names that moved)."""
    return json.dumps(table, indent=0) + "\n"


# --- llama.cpp's converter -----------------------------------------------------------------------------------


def llama_cpp_sdist(version: str, directory: Path) -> Path:
    """llama-cpp-python `version`'s sdist: the one the GGUF tests cached, else downloaded by pip (77 MB)."""
    name = f"llama_cpp_python-{version}.tar.gz"
    cached = Path.home() / ".cache" / "jobtrail-test" / "llama.cpp" / version / name
    if cached.is_file():
        return cached
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"llama-cpp-python=={version}",
            "--dest",
            str(directory),
        ],
        check=True,
    )
    return directory / name


def converter_json(facts: dict[str, Any]) -> str:
    return json.dumps(facts, indent=1, ensure_ascii=False) + "\n"


def describe_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What moved between two versions of a table, in a line: versions, then names added or removed."""
    if old == new:
        return "unchanged"
    parts = [
        f"{key} {old.get(key)} -> {new.get(key)}"
        for key in sorted(old.keys() | new.keys())
        if isinstance(new.get(key, old.get(key)), str) and old.get(key) != new.get(key)
    ]
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before == after or isinstance(after, str) or isinstance(before, str):
            continue
        names_before = set(before) if isinstance(before, list | dict) else set()
        names_after = set(after) if isinstance(after, list | dict) else set()
        added, removed = sorted(names_after - names_before), sorted(names_before - names_after)
        changed = [
            n
            for n in names_after & names_before
            if isinstance(before, dict) and isinstance(after, dict) and before[n] != after[n]
        ]
        detail = [
            f"+{len(added)} {', '.join(added[:8])}" if added else "",
            f"-{len(removed)} {', '.join(removed[:8])}" if removed else "",
            f"{len(changed)} changed: {', '.join(sorted(changed)[:8])}" if changed else "",
        ]
        parts.append(f"{key}: " + "; ".join(d for d in detail if d))
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
