"""Job config → one self-contained PEP 723 script. Pure and deterministic.

A template in scripts/ is an ordinary Python file that runs as it is (next to scripts/_runtime.py).
Rendering touches exactly two marked blocks and nothing else:

    # --- jobtrail:runtime ---      the `from _runtime import ...` line becomes the runtime source
    # --- jobtrail:config ---       the example CONFIG becomes the job's config as one JSON literal

so the rendered script never imports jobtrail and runs anywhere its header's dependencies exist.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from jobtrail.errors import InvalidRequestError

RUNTIME_MODULE = "_runtime.py"
_BLOCK = r"(?ms)^# --- jobtrail:{name} ---\n.*?^# --- end jobtrail:{name} ---\n"


def scripts_dir() -> Path:
    """scripts/ inside an installed wheel, else the source checkout's top-level scripts/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "scripts", here.parents[1] / "scripts"):
        if (candidate / RUNTIME_MODULE).is_file():
            return candidate
    raise InvalidRequestError(
        "The job templates (scripts/) are missing from this installation.",
        fix="Reinstall jobtrail: pip install --force-reinstall jobtrail",
    )


def config_json(config: dict[str, Any]) -> str:
    """Canonical JSON of a job config: the immutable snapshot whose sha256 the ledger keeps."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def render_script(template: str, config: dict[str, Any], *, templates: Path | None = None) -> str:
    """Return the script text for `template` (e.g. "sft") with `config` baked in."""
    root = templates or scripts_dir()
    path = root / f"{template}.py"
    if not path.is_file():
        raise InvalidRequestError(f"No job template named {template!r}.", fix="Use one of: sft")
    source = path.read_text()
    runtime = (root / RUNTIME_MODULE).read_text()
    source = _replace_block(source, "runtime", _runtime_block(runtime))
    snapshot = config_json(config)
    return _replace_block(source, "config", f"CONFIG: dict = json.loads({snapshot!r})\n")


def _runtime_block(runtime_source: str) -> str:
    body = runtime_source.rstrip() + "\n"
    return f"# Inlined from scripts/{RUNTIME_MODULE}: events and the checkpoint commit protocol.\n{body}"


def _replace_block(source: str, name: str, body: str) -> str:
    pattern = re.compile(_BLOCK.format(name=name))
    if len(pattern.findall(source)) != 1:
        raise InvalidRequestError(f"Template is missing its '# --- jobtrail:{name} ---' block.")
    marker_open, marker_close = f"# --- jobtrail:{name} ---\n", f"# --- end jobtrail:{name} ---\n"
    return pattern.sub(lambda _: marker_open + body + marker_close, source)
