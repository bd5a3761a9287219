# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "torch>=2.6", "transformers>=5.23", "peft>=0.21", "safetensors>=0.8", "gguf>=0.19",
#   "sentencepiece>=0.2.3", "protobuf>=7.36", "numpy>=2.2.6", "pyyaml>=6", "huggingface_hub>=2.4", "pip>=23",
# ]
# ///
"""jobtrail convert_gguf job: a model or LoRA adapter → GGUF files for llama.cpp, Ollama, LM Studio.

Steps: check dependencies → fetch llama.cpp's sources (the pinned llama-cpp-python sdist, which
ships convert_hf_to_gguf.py and the quantize tool) → build llama-quantize with CMake, unless the
cache holds it → merge the adapter into its base (PEFT) → convert to F16 with llama.cpp's own
converter (the F16 file is always kept: it is the base of every other file) → quantize → verify
every file (read back with gguf's reader; F16/Q8_0 also loaded by transformers and compared with
the merged model's logits) → model card → push to the Hub when asked.

Runs as it is from scripts/ (`python scripts/convert_gguf.py` converts the example CONFIG below),
or rendered by jobtrail with the runtime (_runtime.py, _llama_cpp.py) and the job's CONFIG inlined. Events:
start, environment, dependencies, source, llama_cpp_build, merged, artifact (kind gguf per file,
llama_cpp, model_card, pushed_gguf), termination. A missing tool or package ends the job with a
dependency_error naming the fix; an unsupported model or tokenizer with a config_error.
"""

import functools
import gc
import importlib.util
import json  # also used by the rendered config block: `CONFIG: dict = json.loads(...)`
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# --- jobtrail:runtime ---
from _llama_cpp import (
    BUILD_RECORD,
    QUANTIZE_TOOL,
    canonical_quantization,
    llama_cpp_facts,
    model_architecture,
    quantize_build,
    quantize_dir,
)
from _runtime import (
    MARKER_NAME,
    emit,
    emit_environment,
    job_output_dir,
    package_version,
    phase,
    run_job,
    sha256_file,
    verify_checkpoint,
)

# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict[str, Any] = {
    "template": "convert_gguf",
    "template_version": 1,
    # kind "dir": a local model or adapter directory; "hub": a Hub repo id. base_model overrides
    # the base an adapter names (adapter_config.json's base_model_name_or_path).
    "source": {"kind": "hub", "path_or_id": "Qwen/Qwen2.5-0.5B-Instruct", "base_model": None},
    "quantizations": ["Q4_K_M"],  # llama-quantize type names; F16 is always produced as the base
    "output_dir": "outputs/gguf",
    "name": "Qwen2.5-0.5B-Instruct",  # file names: <name>-<QUANTIZATION>.gguf
    # version: the llama-cpp-python sdist to take llama.cpp from; cache_dir keeps that sdist, its
    # extracted sources and the built llama-quantize between jobs.
    "llama_cpp": {"version": "0.3.36", "cache_dir": "~/.cache/jobtrail/llama.cpp"},
    # Used only when the converter does not recognise a BPE tokenizer by its hash, e.g. "qwen2".
    "pre_tokenizer": None,
    "push_to_hub": False,
    "hub_model_id": None,
}
# --- end jobtrail:config ---

TEMPLATE_VERSION = 1
BASE_QUANTIZATION = "F16"
# Python modules the job needs → the pip package that provides them.
REQUIRED_MODULES = {
    "torch": "torch",
    "transformers": "transformers",
    "peft": "peft",
    "safetensors": "safetensors",
    "gguf": "gguf",
    "sentencepiece": "sentencepiece",
    "google.protobuf": "protobuf",
    "numpy": "numpy",
    "yaml": "pyyaml",
}
# Only llama-quantize, statically linked so the cached binary stands alone. GGML_NATIVE=OFF: a
# cache directory can be shared by machines with different CPUs, and quantizing is not where the
# time goes. The other switches skip what the quantize target does not need.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
)
TOOL_TAIL_LINES = 40  # lines of a tool's output kept for the failure message
PRE_TOKENIZER_UNKNOWN_EXIT = 3
PRE_TOKENIZER_NOTE = "jobtrail: BPE pre-tokenizer not recognized by hash; used the configured name"
# Prompts whose logits are compared between the merged model and each F16/Q8_0 file.
VERIFY_PROMPTS = ("The capital of France is", "def fibonacci(n):\n    ", "1, 2, 3, 4,")
VERIFY_CHAT = [{"role": "user", "content": "What color is the sky?"}]
# Allowed max|Δlogit| as a fraction of the merged model's max|logit|: F16 rounding stays far below
# 1%, Q8_0 below 5%; more means a broken conversion, not quantization noise.
LOGIT_TOLERANCE = {"F16": 0.01, "Q8_0": 0.05}

# Run with `python -c` in a fresh process, so the converter gets llama.cpp's own gguf-py (it may
# be newer than the installed gguf) and its sys.exit() calls end only that process. It teaches the
# converter one thing: a BPE tokenizer it does not recognise by hash uses the configured
# pre-tokenizer name instead of failing (noting so as its last line of output, where the job reads
# it); with none configured it exits with a distinct code.
CONVERT_DRIVER = f"""
import atexit, runpy, sys
llama_dir, pre_tokenizer, args = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path[0:0] = [llama_dir, llama_dir + '/gguf-py']
from conversion.base import TextModel
recognise = TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return recognise(self, tokenizer)
    except NotImplementedError:
        if not pre_tokenizer:
            sys.exit({PRE_TOKENIZER_UNKNOWN_EXIT})
        atexit.register(print, {PRE_TOKENIZER_NOTE!r}, pre_tokenizer, file=sys.stderr)
        return pre_tokenizer
TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = [llama_dir + '/convert_hf_to_gguf.py', *args]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


class MissingDependency(ImportError):
    """A package, tool or build the job needs is absent (an ImportError: a dependency_error)."""


class ConversionRefused(ValueError):
    """The source cannot be converted as configured; the message says why and what to do."""


class VerificationFailed(RuntimeError):
    """An output file is not what it should be."""


def refuse(message: str, phase_name: str = "config") -> NoReturn:
    """Raise ConversionRefused tagged with `phase_name`: "config" → config_error, "data" → bad_input."""
    with phase(phase_name):
        raise ConversionRefused(message)


# --- tools -------------------------------------------------------------------------------------


def run_tool(cmd: list[str]) -> tuple[int, str]:
    """(exit code, last lines of output). The output goes to stderr as it comes: stdout is the
    event channel, and a tool's line must never pass for an event."""
    tail: deque[str] = deque(maxlen=TOOL_TAIL_LINES)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stderr.write(line)
            tail.append(line.rstrip())
        proc.wait()
    except BaseException:
        proc.kill()  # a SIGTERM to this job must not leave a 4-minute build running
        proc.wait()
        raise
    sys.stderr.flush()
    return proc.returncode, "\n".join(tail)


def last_lines(output: str, count: int = 4) -> str:
    return " | ".join(line.strip() for line in output.splitlines()[-count:] if line.strip())


def find_tool(*names: str) -> str | None:
    """A tool on PATH, or next to this Python (`pip install cmake` puts cmake in the venv's bin)."""
    for name in names:
        found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
        if found:
            return found
    return None


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package ("google" for google.protobuf)
        return False


# --- the llama.cpp cache -----------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaCppCache:
    """One llama-cpp-python version's sdist, extracted sources and built llama-quantize.

    Each entry appears by an atomic rename of a finished temporary sibling, so concurrent jobs
    sharing the directory see a complete entry or none, never half a binary.
    """

    root: Path
    version: str

    @property
    def sdist(self) -> Path:
        return self.root / f"llama_cpp_python-{self.version}.tar.gz"

    @property
    def sources(self) -> Path:  # the sdist's CHANGELOG.md and vendor/llama.cpp
        return self.root / f"sources-{self.version}"

    @property
    def llama_dir(self) -> Path:
        return self.sources / "vendor" / "llama.cpp"

    @property
    def quantize_dir(self) -> Path:
        return quantize_dir(self.root, self.version)

    @property
    def quantize(self) -> Path:
        return self.quantize_dir / QUANTIZE_TOOL

    @functools.cached_property
    def facts(self) -> dict[str, Any]:
        """What these sources' converter and quantizer accept, read (once fetched) by _llama_cpp.py:
        the same reading that gives the server's preflight its facts of the pinned release."""
        return llama_cpp_facts(lambda path: (self.sources / path).read_text(errors="replace"), self.version)

    def build_record(self) -> dict[str, Any] | None:
        """The cached build's record, when its binary is there and was built from this version."""
        return quantize_build(self.root, self.version)


def publish(staging: Path, dest: Path) -> None:
    """Rename a finished temporary directory into place; a concurrent job that got there first wins."""
    try:
        os.replace(staging, dest)
    except OSError:
        if not dest.is_dir():
            raise


def needs_quantizer(names: list[str]) -> bool:
    """Whether llama-quantize must be built: only for a type other than the F16 base, which the
    converter writes alone (a build takes minutes)."""
    return any(str(name).strip().upper() != BASE_QUANTIZATION for name in names)


def check_dependencies(cache: LlamaCppCache, *, quantizer: bool) -> None:
    """Everything the job will need, checked up front; one error naming all that is missing.

    quantizer: llama-quantize will be needed (its build tools are checked unless it is cached)."""
    packages = {pip: package_version(pip) for module, pip in REQUIRED_MODULES.items() if importable(module)}
    missing = [pip for module, pip in REQUIRED_MODULES.items() if not importable(module)]
    problems = [f"Python packages missing: {', '.join(missing)} (pip install {' '.join(missing)})"] if missing else []
    if not cache.sdist.is_file() and not importable("pip"):
        problems.append("pip is needed to fetch llama.cpp's sources from PyPI (python -m ensurepip)")
    tools: dict[str, str | None] = {}
    cached = cache.build_record() is not None
    if quantizer and not cached:
        tools = {
            "cmake": find_tool("cmake"),
            "a C compiler": os.environ.get("CC") or find_tool("cc", "gcc", "clang"),
            "a C++ compiler": os.environ.get("CXX") or find_tool("c++", "g++", "clang++"),
            "make or ninja": find_tool("make", "ninja"),
        }
        absent = [name for name, path in tools.items() if path is None]
        if absent:
            problems.append(
                f"llama-quantize {cache.version} is not cached in {cache.root}, and building it needs "
                f"{', '.join(absent)}, not found here: pip install cmake; apt-get install build-essential (or "
                "your system's compiler package); or set llama_cpp.cache_dir to a cache holding a built one"
            )
    emit("dependencies", packages=packages, tools=tools, quantize_cached=cached)
    if problems:
        raise MissingDependency("; ".join(problems))


def fetch_sources(cache: LlamaCppCache) -> None:
    """The pinned sdist from PyPI (pip verifies its hash) and its llama.cpp tree, once per cache."""
    cache.root.mkdir(parents=True, exist_ok=True)
    if not cache.sdist.is_file():
        _download_sdist(cache)
    if not cache.llama_dir.is_dir():
        _extract_sources(cache)


def _download_sdist(cache: LlamaCppCache) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=cache.root))
    try:
        code, output = run_tool(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={cache.version}",
                "--dest",
                str(staging),
            ]
        )
        if code != 0:
            message = f"pip download llama-cpp-python=={cache.version} failed: {last_lines(output)}"
            if "No matching distribution" in output or "Could not find a version" in output:
                raise MissingDependency(message + " (set llama_cpp.version to a version PyPI has)")
            raise ConnectionError(message)  # the registry did not answer: worth a retry
        os.replace(staging / cache.sdist.name, cache.sdist)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract_sources(cache: LlamaCppCache) -> None:
    """vendor/llama.cpp (without its 75 MB of test vocabularies) and CHANGELOG.md."""
    staging = Path(tempfile.mkdtemp(prefix=".sources-", dir=cache.root))
    try:
        with tarfile.open(cache.sdist) as archive:
            top = archive.getnames()[0].split("/")[0]
            wanted = []
            for member in archive.getmembers():
                relative = member.name.removeprefix(f"{top}/")
                keep = relative == "CHANGELOG.md" or relative.startswith("vendor/llama.cpp/")
                if keep and not relative.startswith("vendor/llama.cpp/models/"):
                    member.name = relative
                    wanted.append(member)
            archive.extractall(staging, members=wanted, filter="data")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is ordinary shared data
        publish(staging, cache.sources)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build_quantize(cache: LlamaCppCache, commit: str | None) -> dict[str, Any]:
    """llama-quantize from the cache, or built now (Release, that target only) and cached."""
    record = cache.build_record()
    if record is not None:
        emit("llama_cpp_build", cached=True, path=str(cache.quantize), seconds=0)
        return record
    work = Path(tempfile.mkdtemp(prefix=".quantize-build-", dir=cache.root))
    try:
        started = time.monotonic()
        build, staging, cmake = work / "build", work / "out", find_tool("cmake") or "cmake"
        configure = [cmake, "-S", str(cache.llama_dir), "-B", str(build), *CMAKE_FLAGS]
        if commit:
            configure.append(f"-DLLAMA_BUILD_COMMIT={commit}")  # what `llama-quantize --version` reports
        compile_ = [
            cmake,
            "--build",
            str(build),
            "--config",
            "Release",
            "--target",
            "llama-quantize",
            "-j",
            str(os.cpu_count() or 2),
        ]
        for step in (configure, compile_):
            code, output = run_tool(step)
            if code != 0:
                raise MissingDependency(f"building llama-quantize failed ({' '.join(step[1:3])}): {last_lines(output)}")
        staging.mkdir()
        shutil.copy2(build / "bin" / QUANTIZE_TOOL, staging / QUANTIZE_TOOL)
        record = {
            "version": cache.version,
            "commit": commit,
            "cmake_flags": list(CMAKE_FLAGS),
            "seconds": round(time.monotonic() - started, 1),
            "sha256": sha256_file(staging / QUANTIZE_TOOL),
        }
        (staging / BUILD_RECORD).write_text(json.dumps(record, indent=1))
        staging.chmod(0o755)
        if cache.quantize_dir.exists() and cache.build_record() is None:
            shutil.rmtree(cache.quantize_dir)  # an entry without a valid record is never trusted
        publish(staging, cache.quantize_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit("llama_cpp_build", cached=False, path=str(cache.quantize), seconds=record["seconds"])
    return cache.build_record() or record


# --- the request against what these sources accept ---------------------------------------------


def checked_quantizations(facts: dict[str, Any], names: list[str]) -> list[str]:
    """The requested types in llama-quantize's spelling, F16 left out (it is always made)."""
    known, aliases = facts["quantizations"], facts["quantization_aliases"]
    unknown = [name for name in names if canonical_quantization(name, known, aliases) is None]
    if unknown:
        refuse(f"llama-quantize has no type {', '.join(unknown)}; it accepts {', '.join(known)}")
    wanted = [q for name in names if (q := canonical_quantization(name, known, aliases)) is not None]
    return [q for i, q in enumerate(wanted) if q != BASE_QUANTIZATION and q not in wanted[:i]]


def check_pre_tokenizer(facts: dict[str, Any], name: str | None) -> None:
    known = facts["pre_tokenizers"]
    if name is not None and name not in known:
        refuse(f"pre_tokenizer {name!r} is not a name llama.cpp knows; use one of {', '.join(known)}")


def require_supported_architecture(facts: dict[str, Any], config: dict[str, Any]) -> None:
    architecture = model_architecture(config)
    if architecture is None:
        refuse("config.json names no architecture; llama.cpp's converter dispatches on config.architectures[0]")
    if architecture not in facts["architectures"]:
        refuse(
            f"llama.cpp's converter (llama-cpp-python {facts['llama_cpp_python']}) does not support "
            f"{architecture}; convert a model of a supported architecture"
        )


# --- the source --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    model_dir: Path  # the model, or the adapter, to convert
    base: str | None  # an adapter's base model (directory or Hub id); None for a full model

    @property
    def is_adapter(self) -> bool:
        return self.base is not None


def resolve_source(spec: dict[str, Any]) -> Source:
    """The source directory (downloaded when a Hub id), verified when it is a jobtrail checkpoint."""
    with phase("data", announce="loading_model"):  # the model to convert, downloaded from the Hub
        if spec["kind"] == "hub":
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(spec["path_or_id"]))
        else:
            path = Path(spec["path_or_id"]).expanduser().resolve()
        if not path.is_dir():
            refuse(f"source {path} is not a directory", "data")
        checkpoint = (path / MARKER_NAME).exists()
        if checkpoint:
            ok, why = verify_checkpoint(path)
            if not ok:
                refuse(f"the checkpoint {path} does not verify ({why}); convert another committed checkpoint", "data")
        adapter_config = read_json(path / "adapter_config.json")
        base = None
        if adapter_config is not None:
            base = spec.get("base_model") or adapter_config.get("base_model_name_or_path")
            _check_base(base)
        elif read_json(path / "config.json") is None:
            refuse(f"{path} holds neither config.json (a model) nor adapter_config.json (a LoRA adapter)", "data")
    emit("source", path=str(path), adapter=base is not None, base_model=base, committed_checkpoint=checkpoint)
    return Source(path, base)


def is_local(ref: str) -> bool:
    """A directory path, as opposed to a Hub id such as 'org/name'."""
    return ref.startswith(("/", "./", "../", "~")) or Path(ref).expanduser().is_dir()


def _check_base(base: str | None) -> None:
    if not base:
        refuse("the adapter names no base model (base_model_name_or_path); set source.base_model")
    if is_local(base) and not (Path(base).expanduser() / "config.json").is_file():
        refuse(
            f"the adapter's base model {base} is not a model directory here; set source.base_model to where "
            "the base lives (a directory or a Hub id)"
        )


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def preflight_config(source: Source) -> dict[str, Any] | None:
    """The config.json that decides the architecture, when readable before any download or merge."""
    if source.base is None:  # a full model
        return read_json(source.model_dir / "config.json")
    return read_json(Path(source.base).expanduser() / "config.json") if is_local(source.base) else None


# --- merging -----------------------------------------------------------------------------------


def merge_adapter(source: Source, dest: Path) -> Path:
    """Base + adapter → one transformers model (and tokenizer) in `dest`."""
    adapter_dir, base_model = source.model_dir, source.base
    if base_model is None:
        raise ValueError(f"{adapter_dir} is a whole model, not an adapter: there is nothing to merge")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    has_tokenizer = any((adapter_dir / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.json"))
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir if has_tokenizer else base_model)
    base = AutoModelForCausalLM.from_pretrained(base_model, dtype="auto")
    match_embeddings(base, adapter_dir, len(tokenizer))
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    if dest.exists():  # an earlier attempt's: this one's replaces it
        shutil.rmtree(dest)
    merged.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    emit(
        "merged",
        path=str(dest),
        base_model=base_model,
        adapter=str(adapter_dir),
        vocab_size=merged.get_input_embeddings().weight.shape[0],
    )
    return dest


def match_embeddings(base: Any, adapter_dir: Path, tokenizer_size: int) -> None:
    """Resize the base's embeddings to the adapter's (PEFT saves them when training resized the
    vocabulary); refuse when the tokenizer grew but the adapter carries no embeddings to match."""
    embeddings = base.get_input_embeddings()
    rows = embeddings.weight.shape[0]
    name = next(n for n, module in base.named_modules() if module is embeddings)
    saved = adapter_embedding_rows(adapter_dir, name)
    if saved is not None and saved != rows:
        base.resize_token_embeddings(saved)
        emit("embeddings_resized", base_rows=rows, adapter_rows=saved)
    elif saved is None and tokenizer_size > rows:
        refuse(
            f"the adapter's tokenizer has {tokenizer_size} tokens but the base embeds {rows} and the adapter "
            "carries no embedding weights, so the added tokens were never trained; retrain with "
            "modules_to_save=['embed_tokens', 'lm_head'] (or save_embedding_layers=True)"
        )


def adapter_embedding_rows(adapter_dir: Path, embedding_name: str) -> int | None:
    """Rows of the full input-embedding matrix in the adapter's weights, if it saved one."""
    from safetensors import safe_open

    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        return None
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open is no dict
            if f"{embedding_name}." in key and key.endswith("weight") and "lora_" not in key:
                return int(f.get_slice(key).get_shape()[0])
    return None


# --- converting and quantizing -----------------------------------------------------------------


def convert_to_f16(llama_dir: Path, model_dir: Path, dest: Path, pre_tokenizer: str | None) -> None:
    partial = dest.with_name(f".{dest.name}.partial")  # never mistaken for a finished file
    code, output = run_tool(
        [
            sys.executable,
            "-c",
            CONVERT_DRIVER,
            str(llama_dir),
            pre_tokenizer or "",
            str(model_dir),
            "--outtype",
            "f16",
            "--outfile",
            str(partial),
        ]
    )
    if code == PRE_TOKENIZER_UNKNOWN_EXIT:
        found = re.search(r"chkhsh:\s+([0-9a-f]{64})", output)
        refuse(
            "llama.cpp's converter does not recognise this BPE tokenizer by its hash"
            f"{f' ({found.group(1)[:12]}…)' if found else ''}; name its pre-tokenizer with pre_tokenizer=..., "
            "e.g. 'qwen2' for Qwen2's split regex or 'llama-bpe' for Llama 3's"
        )
    if code < 0:  # killed (the kernel's OOM killer, a signal): nothing the config can fix
        raise RuntimeError(f"convert_hf_to_gguf.py was killed by signal {-code}: {last_lines(output)}")
    if code != 0:  # the converter's own refusals (unsupported layouts, tensors, settings)
        refuse(f"convert_hf_to_gguf.py failed (exit {code}): {last_lines(output)}")
    os.replace(partial, dest)
    emit("converted", path=str(dest), pre_tokenizer_supplied=PRE_TOKENIZER_NOTE in output)


def quantize(binary: Path, f16: Path, dest: Path, quantization: str) -> None:
    partial = dest.with_name(f".{dest.name}.partial")
    code, output = run_tool([str(binary), str(f16), str(partial), quantization, str(os.cpu_count() or 1)])
    if code != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama-quantize {quantization} failed (exit {code}): {last_lines(output)}")
    os.replace(partial, dest)


# --- verification ------------------------------------------------------------------------------


def read_back(path: Path, quantization: str, chat_template_expected: bool) -> dict[str, Any]:
    """What gguf's reader finds in the file; VerificationFailed listing anything missing or wrong."""
    from gguf import GGUFReader, LlamaFileType

    reader = GGUFReader(str(path))

    def value(key: str) -> Any:
        return reader.fields[key].contents() if key in reader.fields else None

    expected_type = getattr(LlamaFileType, f"MOSTLY_{quantization}", None)
    file_type = value("general.file_type")
    facts = {
        "architecture": value("general.architecture"),
        "file_type": _file_type_name(file_type),
        "tensors": len(reader.tensors),
        "tensor_types": dict(Counter(t.tensor_type.name for t in reader.tensors)),
        "tokenizer": value("tokenizer.ggml.model"),
        "pre_tokenizer": value("tokenizer.ggml.pre"),
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data)
        if "tokenizer.ggml.tokens" in reader.fields
        else 0,
        "chat_template": "tokenizer.chat_template" in reader.fields,
    }
    problems = [
        problem
        for problem, bad in (
            ("no architecture", not facts["architecture"]),
            ("no tensors", facts["tensors"] == 0),
            (
                f"file type {facts['file_type']}, expected MOSTLY_{quantization}",
                expected_type is not None and file_type != expected_type,
            ),
            ("no tokenizer", not facts["tokenizer"] or facts["vocab_size"] == 0),
            ("no chat template (the source has one)", chat_template_expected and not facts["chat_template"]),
        )
        if bad
    ]
    if problems:
        raise VerificationFailed(f"{path.name}: {'; '.join(problems)}")
    return facts


def _file_type_name(file_type: Any) -> Any:
    from gguf import LlamaFileType

    try:
        return LlamaFileType(file_type).name
    except ValueError:
        return file_type


def reference_inputs(tokenizer: Any) -> list[Any]:
    """Token ids of the verification prompts (one through the chat template, when there is one)."""
    ids = [tokenizer(prompt, return_tensors="pt").input_ids for prompt in VERIFY_PROMPTS]
    if tokenizer.chat_template:
        chat = tokenizer.apply_chat_template(VERIFY_CHAT, add_generation_prompt=True, tokenize=False)
        ids.append(tokenizer(chat, return_tensors="pt", add_special_tokens=False).input_ids)
    return ids


def logits_of(model: Any, inputs: list[Any]) -> list[Any]:
    import torch

    with torch.no_grad():
        return [model(ids).logits.float() for ids in inputs]


def compare_logits(path: Path, inputs: list[Any], reference: list[Any]) -> tuple[float | None, str | None]:
    """(max|Δlogit| of the GGUF file loaded by transformers vs the merged model, why not compared)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    except ValueError as exc:
        if "not supported" not in str(exc):
            raise
        return None, f"transformers cannot load this GGUF architecture ({exc})"
    diffs = [(got - want).abs().max().item() for got, want in zip(logits_of(model, inputs), reference, strict=True)]
    del model
    gc.collect()
    return max(diffs), None


def verify_files(files: dict[str, Path], model_dir: Path) -> dict[str, dict[str, Any]]:
    """Per quantization: what the reader found, size, sha256, and for F16/Q8_0 the logit check."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    reports = {q: read_back(path, q, bool(tokenizer.chat_template)) for q, path in files.items()}
    base_facts = reports[BASE_QUANTIZATION]
    for q, facts in reports.items():
        if (facts["architecture"], facts["tensors"]) != (base_facts["architecture"], base_facts["tensors"]):
            raise VerificationFailed(
                f"{files[q].name} has {facts['tensors']} {facts['architecture']} tensors; "
                f"the F16 base has {base_facts['tensors']} {base_facts['architecture']}"
            )
    inputs = reference_inputs(tokenizer)
    merged = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reference = logits_of(merged, inputs)
    del merged  # one model in memory at a time: the merged model can be as large as the F16 file
    gc.collect()
    scale = max(r.abs().max().item() for r in reference)
    for q in (q for q in LOGIT_TOLERANCE if q in files):
        diff, skipped = compare_logits(files[q], inputs, reference)
        reports[q].update(
            max_abs_logit_diff=diff, logit_tolerance=LOGIT_TOLERANCE[q] * scale, logit_check_skipped=skipped
        )
        if diff is not None and diff > LOGIT_TOLERANCE[q] * scale:
            raise VerificationFailed(
                f"{files[q].name}: max|Δlogit| {diff:.4g} against the merged model exceeds "
                f"{LOGIT_TOLERANCE[q]:.0%} of its largest logit ({scale:.4g})"
            )
    for q, path in files.items():
        reports[q].update(bytes=path.stat().st_size, sha256=sha256_file(path))
    return reports


# --- model card and push -----------------------------------------------------------------------


def model_card(
    name: str,
    source: Source,
    files: dict[str, Path],
    reports: dict[str, dict[str, Any]],
    llama_cpp: dict[str, Any],
    repo: str | None,
) -> str:
    """README.md for the files: what they are and how to run them in llama.cpp, Ollama, LM Studio."""
    quantized = [q for q in files if q != BASE_QUANTIZATION]
    pick = quantized[0] if quantized else BASE_QUANTIZATION  # the example the usage sections run
    example = files[pick].name
    origin = f"`{CONFIG['source']['path_or_id']}`"
    if source.base:
        origin += f" (a LoRA adapter merged into `{source.base}`)"
    front = "library_name: gguf\ntags: [gguf, llama.cpp, jobtrail]"
    if source.base and not is_local(source.base):
        front += f"\nbase_model: {source.base}"
    hub = (
        f"\nStraight from the Hub: `llama-cli -hf {repo}:{pick}` or `ollama run hf.co/{repo}:{pick}`.\n" if repo else ""
    )
    return f"""---
{front}
---

# {name} (GGUF)

GGUF files of {origin}, converted by jobtrail with llama.cpp {llama_cpp["commit"] or ""} (llama-cpp-python
{llama_cpp["version"]}). {BASE_QUANTIZATION} is the unquantized base file; max|Δlogit| compares a file, loaded
by transformers, with the merged model on a few prompts.

| file | type | size | max abs logit diff | sha256 |
|---|---|---|---|---|
{_file_rows(files, reports)}

## llama.cpp

```sh
llama-cli -m {example} -cnv
llama-server -m {example} --port 8080
```

## Ollama

Write a `Modelfile` next to the file:

```
FROM ./{example}
```

```sh
ollama create {name.lower()} -f Modelfile
ollama run {name.lower()}
```

## LM Studio

`lms import {example}` (or copy it into LM Studio's models folder), then load it.
{hub}"""


def _file_rows(files: dict[str, Path], reports: dict[str, dict[str, Any]]) -> str:
    rows = []
    for q, path in files.items():
        diff = reports[q].get("max_abs_logit_diff")
        rows.append(
            f"| `{path.name}` | {q} | {reports[q]['bytes'] / 2**20:.1f} MiB | "
            f"{'-' if diff is None else f'{diff:.3g}'} | `{reports[q]['sha256'][:16]}…` |"
        )
    return "\n".join(rows)


def push_files(out: Path, repo: str, files: dict[str, Path]) -> None:
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo, exist_ok=True)
    names = [path.name for path in files.values()]
    api.upload_folder(
        folder_path=str(out), repo_id=repo, allow_patterns=[*names, "README.md"], commit_message="jobtrail: GGUF files"
    )
    emit("artifact", kind="pushed_gguf", repo=repo, files=names)


# --- the job -----------------------------------------------------------------------------------


def main() -> None:
    emit(
        "start",
        template=CONFIG.get("template", "convert_gguf"),
        template_version=CONFIG.get("template_version", TEMPLATE_VERSION),
        run_id=os.environ.get("JOBTRAIL_RUN_ID", "local"),
        attempt_id=os.environ.get("JOBTRAIL_ATTEMPT_ID", "local-1"),
    )
    emit_environment()
    out = job_output_dir(CONFIG, "convert_gguf")
    cache = LlamaCppCache(Path(CONFIG["llama_cpp"]["cache_dir"]).expanduser().resolve(), CONFIG["llama_cpp"]["version"])
    quantizations, source, config = prepare(cache)
    llama_cpp = llama_cpp_tools(cache, build=bool(quantizations))

    with phase("model", announce="loading_model"):
        model_dir = merge_adapter(source, out / "merged") if source.is_adapter else source.model_dir
    if config is None:  # an adapter on a Hub base: its config is known only now
        require_supported_architecture(cache.facts, read_json(model_dir / "config.json") or {})
    name = CONFIG.get("name") or "model"
    files = {q: out / f"{name}-{q}.gguf" for q in (BASE_QUANTIZATION, *quantizations)}
    with phase("convert", announce="converting"):
        convert_to_f16(cache.llama_dir, model_dir, files[BASE_QUANTIZATION], CONFIG.get("pre_tokenizer"))
    with phase("quantize", announce="quantizing" if quantizations else None):
        for q in quantizations:
            quantize(cache.quantize, files[BASE_QUANTIZATION], files[q], q)
    with phase("verify"):
        reports = verify_files(files, model_dir)
    for q, path in files.items():
        emit("artifact", kind="gguf", path=str(path), quantization=q, **reports[q])
    if source.is_adapter:
        shutil.rmtree(out / "merged")  # as large as the F16 file, and rebuilt from the adapter at will

    repo = CONFIG.get("hub_model_id") if CONFIG.get("push_to_hub") else None
    card = out / "README.md"
    card.write_text(model_card(name, source, files, reports, llama_cpp, repo))
    emit("artifact", kind="model_card", path=str(card))
    if repo:
        with phase("push", announce="pushing"):
            push_files(out, repo, files)


def prepare(cache: LlamaCppCache) -> tuple[list[str], Source, dict[str, Any] | None]:
    """Every check that needs no build: dependencies, names, the source and its architecture.

    Returns the quantizations, the source, and the config.json that was checked (None when it is
    only known after merging: an adapter on a Hub base)."""
    with phase("dependencies"):
        check_dependencies(cache, quantizer=needs_quantizer(CONFIG["quantizations"]))
    with phase("llama_cpp"):
        fetch_sources(cache)
        facts = cache.facts
    quantizations = checked_quantizations(facts, CONFIG["quantizations"])
    check_pre_tokenizer(facts, CONFIG.get("pre_tokenizer"))
    source = resolve_source(CONFIG["source"])
    config = preflight_config(source)
    if config is not None:
        require_supported_architecture(facts, config)
    return quantizations, source, config


def llama_cpp_tools(cache: LlamaCppCache, *, build: bool) -> dict[str, Any]:
    """llama-quantize built (or taken from the cache) when `build`, and the `llama_cpp` artifact for
    the receipt (an F16-only conversion uses the converter alone: no quantizer, no sha256)."""
    with phase("llama_cpp", announce="installing" if build else None):
        commit = cache.facts["llama_cpp_commit"]
        record = build_quantize(cache, commit) if build else {"sha256": None, "seconds": 0}
    receipt = {
        "version": cache.version,
        "commit": commit,
        "sdist_sha256": sha256_file(cache.sdist),
        "quantize_sha256": record["sha256"],
        "build_seconds": record["seconds"],
    }
    emit("artifact", kind="llama_cpp", path=str(cache.quantize if build else cache.llama_dir), **receipt)
    return receipt


if __name__ == "__main__":
    run_job(main)
