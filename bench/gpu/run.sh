#!/usr/bin/env bash
# The speed bench on the device machine (no network): install the carried wheels beside its own torch, say
# which versions run, then run each bench command given, every line of output kept under $OUT.
#
#   bash bench/gpu/run.sh ['SCRIPT ARGS...' ...]     from the repo root, with .whl/ carried (bench/gpu/kit.py)
#
# Each argument is one command: a Python script of the repo and its arguments, run by $PYTHON (python3).
# Default: 'bench/train_throughput.py --offline-shape qwen2.5-0.5b --steps 30'. Written under $OUT
# (the device tool returns at most 8 files): env.txt (versions, device, unmet requirements), then per
# command N-NAME.log (all its output, as it comes, so a run killed at its limit still returns its log)
# and, when the command has --json, N-NAME.json (the report alone). Exit status: the first failure's.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
PY=${PYTHON:-python3}
OUT=${OUT:?set OUT to the folder the results go to}
SITE=${GPU_SITE:-/tmp/site}
mkdir -p "$OUT"
[ $# -gt 0 ] || set -- "bench/train_throughput.py --offline-shape qwen2.5-0.5b --steps 30"

shopt -s nullglob
wheels=(.whl/*.whl)
[ ${#wheels[@]} -gt 0 ] || { echo "no wheels in .whl/: run bench/gpu/kit.py here and carry .whl" >&2; exit 2; }
rm -rf "$SITE"  # the kit's versions alone, not a warm machine's earlier ones
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}" \
    || exit 3

# The bench's children (the rendered job, the baseline) inherit all of this.
export PYTHONPATH="$SITE:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export JOBTRAIL_HOME=${JOBTRAIL_HOME:-/tmp/jobtrail-home}
export HF_HOME=${HF_HOME:-/tmp/hf-home}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # nothing outside can be reached
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

"$PY" - "${wheels[@]}" <<'EOF' 2>&1 | tee "$OUT/env.txt"
"""Versions, where each comes from, the device, and any carried wheel's requirement left unmet."""
import importlib, importlib.metadata as md, platform, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

print(f"python {platform.python_version()} ({sys.executable}) on {platform.machine()}")
for module, dist in [("torch", "torch"), ("transformers", "transformers"), ("trl", "trl"), ("peft", "peft"),
                     ("liger_kernel", "liger-kernel"), ("accelerate", "accelerate"), ("datasets", "datasets"),
                     ("trackio", "trackio"), ("huggingface_hub", "huggingface-hub"), ("jobtrail", None)]:
    try:
        where = importlib.import_module(module).__file__
        print(f"{module:16} {md.version(dist) if dist else '(source)':14} {where}")
    except Exception as exc:  # a missing one is the finding: say it and go on
        print(f"{module:16} NOT IMPORTABLE   {type(exc).__name__}: {exc}")
import torch
cuda = torch.cuda.is_available()
print(f"torch CUDA {torch.version.cuda}, device: {torch.cuda.get_device_name(0) if cuda else 'none (CPU)'}")
unmet = []
for wheel in sys.argv[1:]:
    name = canonicalize_name(wheel.rsplit("/", 1)[-1].split("-")[0])
    for req in map(Requirement, md.requires(name) or []):
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            found = md.version(req.name)
        except md.PackageNotFoundError:
            found = None
        if found is None or not req.specifier.contains(found, prereleases=True):
            unmet.append(f"{name} needs {req}, found {found or 'nothing'}")
print("unmet requirements of the carried wheels: " + ("; ".join(unmet) if unmet else "none"))
EOF

status=0
n=0
for command in "$@"; do
    n=$((n + 1))
    read -r -a argv <<<"$command"
    name="$n-$(basename "${argv[0]}" .py)"
    echo "== $PY $command" | tee "$OUT/$name.log"
    if [[ " $command " == *" --json "* ]]; then
        # stdout alone is the report; everything (report included) goes to the log
        "$PY" "${argv[@]}" 2> >(tee -a "$OUT/$name.log" >&2) | tee "$OUT/$name.json" | tee -a "$OUT/$name.log"
    else
        "$PY" "${argv[@]}" 2>&1 | tee -a "$OUT/$name.log"
    fi
    rc=$?
    echo "== exit $rc: $command" | tee -a "$OUT/$name.log"
    [ $status -ne 0 ] || status=$rc
done
exit $status
