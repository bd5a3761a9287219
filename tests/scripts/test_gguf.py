"""Issue 8, convert_gguf: the preflight (jobtrail.preflight.conversion, .llama_cpp) and the real job.

The job test does what the issue's "How we will know" says: a tiny Qwen2 (hidden size 256, so
K-quants apply) is trained by a jobtrail LoRA SFT job, and scripts/convert_gguf.py, rendered and
run as a subprocess, turns the adapter into F16, Q8_0 and Q4_K_M files that are then read back
here with gguf's reader. Nothing is mocked.

llama.cpp's sources (the llama-cpp-python sdist) and the built llama-quantize are cached across
test runs in LLAMA_CPP_CACHE (a stable per-machine directory, overridable with the environment
variable JOBTRAIL_LLAMA_CPP_CACHE): the first run downloads and builds (about 5 minutes here),
later runs reuse both.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtrail.models import Finding
from jobtrail.preflight.conversion import check_conversion, check_quantizations, conversion_facts
from jobtrail.templates.configs import conversion_config, default_name
from jobtrail.templates.llama_cpp import (
    FACTS_FILE,
    LLAMA_CPP_PYTHON_VERSION,
    converter_facts,
    derive_converter_facts,
    normalize_quantizations,
)
from jobtrail.templates.render import render_script, scripts_dir
from support.hub_emulator import HubEmulator
from support.jobs import (
    FIRST_BUILD_TIMEOUT_S,
    LLAMA_CPP_CACHE,
    JobRun,
    assert_templates_import_light,
    load_script_module,
    lora_job_config,
    parse_events,
    succeeded,
    top_level_names,
)

SCRIPTS = scripts_dir()
SDIST = LLAMA_CPP_CACHE / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
JOB_TIMEOUT_S = 300
HUB_TOKEN, HUB_REPO = "hf_gguf_writer", "alice/tiny-gguf"


def codes(findings: list[Finding]) -> dict[str, Finding]:
    return {f.code: f for f in findings}


# --- preflight: quantization names -------------------------------------------------------------


def test_unknown_quantization_is_an_error_with_a_suggestion() -> None:
    (finding,) = check_quantizations(["Q4_K_N"])
    assert (finding.code, finding.severity) == ("gguf.quantization_unknown", "error")
    suggestion, listed = finding.fix.split("?", 1)
    assert suggestion.startswith("Did you mean") and "Q4_K_M" in suggestion and "Q8_0" in listed


def test_quantization_names_follow_llama_quantize() -> None:
    assert normalize_quantizations(["q8_0", "F16", "Q8_0", "q4_k_m", "Q4_K"]) == ["Q8_0", "Q4_K_M"]
    assert check_quantizations(["Q4_K_M", "q5_k_m", "Q6_K", "Q8_0", "F16"]) == []
    assert codes(check_quantizations(["IQ2_XXS"]))["gguf.quantization_needs_imatrix"].severity == "error"
    assert codes(check_quantizations(["F32"]))["gguf.quantization_pointless"].severity == "error"


# --- preflight: the source ---------------------------------------------------------------------


def _copy_model(src: Path, dest: Path, *, config: dict[str, Any] | None = None, tokenizer: bool = True) -> Path:
    """A model directory's small files (no weights: the preflight never reads them)."""
    dest.mkdir(parents=True)
    shutil.copy(src / "config.json", dest)
    if config is not None:
        (dest / "config.json").write_text(json.dumps({**json.loads((src / "config.json").read_text()), **config}))
    if tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(src / name, dest)
    return dest


def _adapter(dest: Path, base: str, *, embedding_rows: int | None = None, extra_tokens: int = 0) -> Path:
    """An adapter directory as PEFT writes it, with only a safetensors header for weights."""
    dest.mkdir(parents=True)
    (dest / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
    header: dict[str, Any] = {
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {
            "dtype": "F32",
            "shape": [8, 64],
            "data_offsets": [0, 0],
        }
    }
    if embedding_rows is not None:
        header["base_model.model.model.embed_tokens.weight"] = {
            "dtype": "F32",
            "shape": [embedding_rows, 64],
            "data_offsets": [0, 0],
        }
    raw = json.dumps(header).encode()
    (dest / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    vocab = {f"t{i}": i for i in range(800 + extra_tokens)}
    (dest / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []}}))
    return dest


def test_k_quant_on_hidden_64_warns_and_says_what_to_use(tiny_model: Path) -> None:
    found = codes(check_conversion(conversion_facts(str(tiny_model)), ["Q4_K_M"], pre_tokenizer="qwen2"))
    fallback = found["gguf.k_quant_fallback"]
    assert fallback.severity == "warning"
    assert "hidden_size 64" in fallback.message and "256" in fallback.message and "Q8_0" in fallback.fix
    assert "gguf.k_quant_fallback" not in codes(check_conversion(conversion_facts(str(tiny_model)), ["Q8_0"], "qwen2"))


def test_custom_bpe_tokenizer_needs_a_pre_tokenizer_name(tiny_model: Path) -> None:
    found = codes(check_conversion(conversion_facts(str(tiny_model)), ["Q8_0"]))
    needed = found["gguf.pre_tokenizer_needed"]
    assert needed.severity == "warning" and "pre_tokenizer='qwen2'" in needed.fix  # its regex is Qwen2's
    assert check_conversion(conversion_facts(str(tiny_model)), ["Q8_0"], pre_tokenizer="qwen2") == []
    unknown = codes(check_conversion(conversion_facts(str(tiny_model)), ["Q8_0"], pre_tokenizer="qwen"))
    assert unknown["gguf.pre_tokenizer_unknown"].severity == "error"
    assert "qwen2" in unknown["gguf.pre_tokenizer_unknown"].fix


def test_unsupported_or_missing_architecture_is_an_error(tiny_model: Path, tmp_path: Path) -> None:
    fancy = _copy_model(tiny_model, tmp_path / "fancy", config={"architectures": ["FancyNewForCausalLM"]})
    finding = codes(check_conversion(conversion_facts(str(fancy)), ["Q8_0"], "qwen2"))["gguf.architecture_unsupported"]
    assert finding.severity == "error" and "FancyNewForCausalLM" in finding.message and finding.fix
    bare = _copy_model(tiny_model, tmp_path / "bare", config={"architectures": []})
    assert "gguf.architecture_missing" in codes(check_conversion(conversion_facts(str(bare)), ["Q8_0"], "qwen2"))


def test_missing_tokenizer_is_an_error(tiny_model: Path, tmp_path: Path) -> None:
    model = _copy_model(tiny_model, tmp_path / "no-tokenizer", tokenizer=False)
    finding = codes(check_conversion(conversion_facts(str(model)), ["Q8_0"]))["gguf.tokenizer_missing"]
    assert finding.severity == "error" and "save_pretrained" in finding.fix


def test_adapter_whose_base_is_missing_is_refused_with_the_fix(tiny_model: Path, tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "adapter", "/nowhere/base-model")
    finding = codes(check_conversion(conversion_facts(str(adapter)), ["Q8_0"], "qwen2"))["gguf.adapter_base_missing"]
    assert (
        finding.severity == "error"
        and "/nowhere/base-model" in finding.message
        and "base_model_name_or_path" in finding.fix
    )
    # base_model= names the base instead: the base's architecture and K-quant shapes are then checked.
    found = codes(check_conversion(conversion_facts(str(adapter), base_model=str(tiny_model)), ["Q4_K_M"], "qwen2"))
    assert "gguf.adapter_base_missing" not in found and "gguf.k_quant_fallback" in found
    hub_base = _adapter(tmp_path / "hub-adapter", "Qwen/Qwen2.5-0.5B")
    assert (
        codes(check_conversion(conversion_facts(str(hub_base)), ["Q8_0"], "qwen2"))[
            "gguf.adapter_base_unverified"
        ].severity
        == "warning"
    )


def test_resized_embeddings_are_merged_or_refused(tiny_model: Path, tmp_path: Path) -> None:
    resized = _adapter(tmp_path / "resized", str(tiny_model), embedding_rows=802, extra_tokens=2)
    found = codes(check_conversion(conversion_facts(str(resized)), ["Q8_0"], "qwen2"))
    assert found["gguf.embeddings_resized"].severity == "info" and "802" in found["gguf.embeddings_resized"].message
    untrained = _adapter(tmp_path / "untrained", str(tiny_model), extra_tokens=2)
    refused = codes(check_conversion(conversion_facts(str(untrained)), ["Q8_0"], "qwen2"))["gguf.embeddings_untrained"]
    assert refused.severity == "error" and "modules_to_save" in refused.fix


def test_missing_source_and_hub_source(tmp_path: Path) -> None:
    assert codes(check_conversion(conversion_facts(str(tmp_path / "nope")), ["Q8_0"]))["gguf.source_missing"]
    (tmp_path / "empty").mkdir()
    assert codes(check_conversion(conversion_facts(str(tmp_path / "empty")), ["Q8_0"]))["gguf.source_missing"]
    hub = codes(check_conversion(conversion_facts("Qwen/Qwen2.5-0.5B"), ["Q8_0"]))
    assert hub["gguf.source_unverified"].severity == "warning"


def test_conversion_config_is_the_templates_contract(tmp_path: Path) -> None:
    config = conversion_config(
        str(tmp_path / "runs" / "sft-1" / "out" / "final"),
        output_dir=tmp_path / "gguf",
        cache_dir=tmp_path / "cache",
        quantizations=["q8_0", "F16", "Q4_K_M"],
        pre_tokenizer="qwen2",
    )
    example = _template_config()
    assert set(config) == set(example) and set(config["source"]) == set(example["source"])
    assert set(config["llama_cpp"]) == set(example["llama_cpp"])
    assert config["quantizations"] == ["Q8_0", "Q4_K_M"]
    assert config["source"]["kind"] == "dir" and config["name"] == "sft-1"
    assert config["llama_cpp"]["version"] == LLAMA_CPP_PYTHON_VERSION == example["llama_cpp"]["version"]
    assert conversion_config("Qwen/Qwen2.5-0.5B", output_dir=tmp_path, cache_dir=tmp_path)["source"]["kind"] == "hub"
    assert default_name("Qwen/Qwen2.5-0.5B") == "Qwen2.5-0.5B"
    assert default_name("/x/final", hub_model_id="me/tiny-gguf") == "tiny-gguf"


def _template_config() -> dict[str, Any]:
    tree = ast.parse((SCRIPTS / "convert_gguf.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "CONFIG")
    return ast.literal_eval(node.value)


# --- the template ------------------------------------------------------------------------------


def test_rendered_script_is_self_contained(tmp_path: Path) -> None:
    config = conversion_config("/models/adapter", output_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    text = render_script("convert_gguf", config)
    assert "from _runtime" not in text and "from _llama_cpp" not in text
    assert "import jobtrail" not in text and "from jobtrail" not in text
    assert "def run_job(" in text and "def llama_cpp_facts(" in text and text.startswith("# /// script\n")
    ast.parse(text)
    names = [top_level_names(SCRIPTS / f"{name}.py") for name in ("convert_gguf", "_runtime", "_llama_cpp")]
    clashes = (names[0] & names[1]) | (names[0] & names[2]) | (names[1] & names[2])
    assert not clashes, f"convert_gguf.py and its runtime modules share names once inlined: {clashes}"


def test_template_imports_without_heavy_packages(job_env: dict[str, str]) -> None:
    assert_templates_import_light(["convert_gguf"], job_env)


# --- the real job ------------------------------------------------------------------------------


def run_script(script: Path, env: dict[str, str], timeout: float = JOB_TIMEOUT_S) -> JobRun:
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True, text=True, timeout=timeout
    )
    return JobRun(proc.returncode, proc.stdout, proc.stderr, parse_events(proc.stdout))


def run_scripts(*jobs: tuple[Path, dict[str, str]]) -> list[JobRun]:
    """Side by side: they are mostly imports and model loading."""
    procs = [
        (
            subprocess.Popen(
                [sys.executable, str(s)], cwd=s.parent, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
        for s, e in jobs
    ]
    outputs = [p.communicate(timeout=JOB_TIMEOUT_S) for p in procs]
    return [JobRun(p.returncode, out, err, parse_events(out)) for p, (out, err) in zip(procs, outputs, strict=True)]


def render_conversion(workdir: Path, source: Path, **options: Any) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    options.setdefault("cache_dir", LLAMA_CPP_CACHE)
    config = conversion_config(str(source), output_dir=workdir / "gguf", **options)
    script = workdir / "convert.py"
    script.write_text(render_script("convert_gguf", config))
    return script


@pytest.fixture(scope="module")
def sft_adapter(
    tmp_path_factory: pytest.TempPathFactory, tiny256: Path, chat_dataset: Path, job_env: dict[str, str]
) -> Path:
    """A LoRA adapter trained by a real jobtrail SFT job (4 steps): its committed output_dir/final."""
    workdir = tmp_path_factory.mktemp("sft256")
    config = lora_job_config("sft", tiny256, chat_dataset, workdir / "out", retention=1, max_steps=4, save_steps=4)
    script = workdir / "sft.py"
    script.write_text(render_script("sft", config))
    succeeded(run_script(script, {**job_env, "OMP_NUM_THREADS": "1"}))
    return workdir / "out" / "final"


@pytest.fixture(scope="module")
def conversion(tmp_path_factory: pytest.TempPathFactory, sft_adapter: Path, job_env: dict[str, str]) -> JobRun:
    """The adapter → F16 + Q8_0 + Q4_K_M. The first run on a machine also fills LLAMA_CPP_CACHE."""
    script = render_conversion(
        tmp_path_factory.mktemp("convert"), sft_adapter, quantizations=["Q8_0", "Q4_K_M"], pre_tokenizer="qwen2"
    )
    return run_script(script, job_env, timeout=FIRST_BUILD_TIMEOUT_S)


def _gguf_artifacts(run: JobRun) -> dict[str, dict[str, Any]]:
    return {e["quantization"]: e for e in run.named("artifact", kind="gguf")}


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_trained_adapter_converts_to_three_verified_files(conversion: JobRun, sft_adapter: Path) -> None:
    run = succeeded(conversion)
    artifacts = _gguf_artifacts(run)
    assert set(artifacts) == {"F16", "Q8_0", "Q4_K_M"}
    source = run.one("source")
    assert source["adapter"] and source["committed_checkpoint"] and source["path"] == str(sft_adapter)
    assert run.one("merged")["base_model"]
    assert run.one("converted")["pre_tokenizer_supplied"] is True  # the tiny BPE has no known hash
    f16_tensors = None
    for quantization, artifact in artifacts.items():
        path = Path(artifact["path"])
        assert path.name.endswith(f"-{quantization}.gguf") and path.parent.name == "gguf"
        assert artifact["bytes"] == path.stat().st_size > 0
        assert artifact["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        facts = _read_gguf(path)
        assert facts["architecture"] == artifact["architecture"] == "qwen2"
        assert facts["tokenizer"] == "gpt2" and facts["pre"] == "qwen2" and facts["tokens"] >= 800
        assert facts["chat_template"] and facts["file_type"] == f"MOSTLY_{quantization}"
        f16_tensors = f16_tensors or facts["tensors"]
        assert facts["tensors"] == f16_tensors == artifact["tensors"]
    assert "F16" in _read_gguf(Path(artifacts["F16"]["path"]))["types"]
    assert "Q8_0" in _read_gguf(Path(artifacts["Q8_0"]["path"]))["types"]
    assert {"Q4_K", "Q6_K"} <= set(_read_gguf(Path(artifacts["Q4_K_M"]["path"]))["types"])  # real K-quants


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_f16_and_q8_0_match_the_merged_model(conversion: JobRun) -> None:
    artifacts = _gguf_artifacts(succeeded(conversion))
    assert 0 <= artifacts["F16"]["max_abs_logit_diff"] < 5e-3
    assert 0 <= artifacts["Q8_0"]["max_abs_logit_diff"] < 5e-2
    assert artifacts["F16"]["max_abs_logit_diff"] <= artifacts["Q8_0"]["max_abs_logit_diff"]
    assert "max_abs_logit_diff" not in artifacts["Q4_K_M"]  # 4-bit error is expected, not checked


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_receipt_records_llama_cpp_and_a_model_card(conversion: JobRun) -> None:
    run = succeeded(conversion)
    (llama,) = run.named("artifact", kind="llama_cpp")
    assert llama["version"] == LLAMA_CPP_PYTHON_VERSION and llama["commit"] == converter_facts().llama_cpp_commit
    assert len(llama["sdist_sha256"]) == 64 and len(llama["quantize_sha256"]) == 64
    card = Path(run.named("artifact", kind="model_card")[0]["path"])
    text = card.read_text()
    assert "FROM ./" in text and "llama-cli -m" in text and "Q4_K_M" in text
    assert not (card.parent / "merged").exists()  # the working copy of the merged model is gone
    # Reading the adapter, building llama-quantize (cached here), merging, then the two llama.cpp stages.
    phases = [e["phase"] for e in run.named("phase")]
    assert phases == ["loading_model", "installing", "loading_model", "converting", "quantizing"]


def _read_gguf(path: Path) -> dict[str, Any]:
    from gguf import GGUFReader, LlamaFileType  # numpy only: no torch in the test process

    reader = GGUFReader(str(path))

    def value(key: str) -> Any:
        return reader.fields[key].contents() if key in reader.fields else None

    return {
        "architecture": value("general.architecture"),
        "file_type": LlamaFileType(value("general.file_type")).name,
        "tensors": len(reader.tensors),
        "types": {t.tensor_type.name for t in reader.tensors},
        "tokenizer": value("tokenizer.ggml.model"),
        "pre": value("tokenizer.ggml.pre"),
        "tokens": len(reader.fields["tokenizer.ggml.tokens"].data),
        "chat_template": "tokenizer.chat_template" in reader.fields,
    }


@pytest.fixture(scope="module")
def gguf_hub() -> Iterator[HubEmulator]:
    """A Hub emulator for the module, where alice may push."""
    with HubEmulator() as emulator:
        emulator.add_token(HUB_TOKEN, "alice")
        yield emulator
        assert not emulator.errors, "Hub emulator bugs:\n" + "\n".join(emulator.errors)


@pytest.fixture(scope="module")
def follow_ups(
    conversion: JobRun,
    tiny256: Path,
    tmp_path_factory: pytest.TempPathFactory,
    job_env: dict[str, str],
    gguf_hub: HubEmulator,
) -> dict[str, JobRun]:
    """Jobs run once the cache is warm, side by side: what must not rebuild (and pushes, as on a
    remote backend), and what must refuse."""
    root = tmp_path_factory.mktemp("follow-ups")
    fancy = root / "fancy-model"
    shutil.copytree(tiny256, fancy)
    config = json.loads((fancy / "config.json").read_text())
    (fancy / "config.json").write_text(json.dumps({**config, "architectures": ["FancyNewForCausalLM"]}))
    online = {k: v for k, v in job_env.items() if k != "HF_HUB_OFFLINE"}
    jobs = {
        "cached": (
            render_conversion(
                root / "cached",
                tiny256,
                quantizations=["Q8_0"],
                pre_tokenizer="qwen2",
                push_to_hub=True,
                hub_model_id=HUB_REPO,
            ),
            {**online, "HF_ENDPOINT": gguf_hub.url, "HF_TOKEN": HUB_TOKEN},
        ),
        "no_pre_tokenizer": (render_conversion(root / "no-pre", tiny256, quantizations=[]), job_env),
        "unsupported": (
            render_conversion(root / "fancy", fancy, quantizations=["Q8_0"], pre_tokenizer="qwen2"),
            job_env,
        ),
        # An empty cache and no build tools on PATH: nothing to build llama-quantize with.
        "no_cmake": (
            render_conversion(root / "no-cmake", tiny256, cache_dir=root / "empty-cache"),
            {**job_env, "PATH": str(root / "empty-path")},
        ),
    }
    return dict(zip(jobs, run_scripts(*jobs.values()), strict=True))


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_quantize_build_is_cached_between_jobs(follow_ups: dict[str, JobRun]) -> None:
    run = succeeded(follow_ups["cached"])
    assert run.one("dependencies")["quantize_cached"] is True
    assert run.one("llama_cpp_build")["cached"] is True
    assert run.one("source")["adapter"] is False  # a full model converts without merging
    assert set(_gguf_artifacts(run)) == {"F16", "Q8_0"}


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_push_uploads_the_files_and_a_model_card(follow_ups: dict[str, JobRun], gguf_hub: HubEmulator) -> None:
    run = succeeded(follow_ups["cached"])
    (pushed,) = run.named("artifact", kind="pushed_gguf")
    files = gguf_hub.repo_files(HUB_REPO)
    assert pushed["repo"] == HUB_REPO and set(pushed["files"]) == {"tiny-gguf-F16.gguf", "tiny-gguf-Q8_0.gguf"}
    assert set(files) >= {"tiny-gguf-F16.gguf", "tiny-gguf-Q8_0.gguf", "README.md"}
    for artifact in _gguf_artifacts(run).values():
        assert hashlib.sha256(files[Path(artifact["path"]).name]).hexdigest() == artifact["sha256"]
    card = files["README.md"].decode()
    assert f"llama-cli -hf {HUB_REPO}:Q8_0" in card and f"ollama run hf.co/{HUB_REPO}:Q8_0" in card


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_unrecognised_tokenizer_without_pre_tokenizer_is_a_config_error(follow_ups: dict[str, JobRun]) -> None:
    run = follow_ups["no_pre_tokenizer"]
    assert run.returncode == 1 and run.termination["reason"] == "config_error", run.describe()
    assert "pre_tokenizer=" in run.termination["message"] and "qwen2" in run.termination["message"]


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_unsupported_architecture_is_a_config_error(follow_ups: dict[str, JobRun]) -> None:
    run = follow_ups["unsupported"]
    assert run.returncode == 1 and run.termination["reason"] == "config_error", run.describe()
    assert "FancyNewForCausalLM" in run.termination["message"]
    assert not run.named("llama_cpp_build")  # refused before building anything


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 300)
def test_missing_cmake_is_a_dependency_error_with_the_fix(follow_ups: dict[str, JobRun]) -> None:
    run = follow_ups["no_cmake"]
    assert run.returncode == 1 and run.termination["reason"] == "dependency_error", run.describe()
    message = run.termination["message"]
    assert "cmake" in message and "pip install cmake" in message and "compiler" in message
    assert run.one("dependencies")["tools"]["cmake"] is None


def test_resized_embeddings_are_merged_first(tiny_model: Path, tmp_path: Path, job_env: dict[str, str]) -> None:
    """An adapter trained with two added tokens (embeddings saved, as PEFT does): the template's
    merge resizes the base first and matches PEFT's own merge; without saved embeddings it refuses."""
    code = """
import sys
from pathlib import Path
scripts, base, tmp = sys.argv[1], sys.argv[2], Path(sys.argv[3])
sys.path.insert(0, scripts)
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
import convert_gguf as job

def adapter(dest, save_embeddings):
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.add_tokens(["<|tool|>", "<|result|>"])
    model = AutoModelForCausalLM.from_pretrained(base)
    model.resize_token_embeddings(len(tokenizer))
    saved = ["embed_tokens"] if save_embeddings else None
    peft = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=saved))
    peft.save_pretrained(dest, save_embedding_layers=save_embeddings)
    tokenizer.save_pretrained(dest)
    return peft, tokenizer

peft, tokenizer = adapter(tmp / "resized", True)
merged = job.merge_adapter(job.Source(tmp / "resized", base), tmp / "merged")
ids = torch.tensor([[1, 5, len(tokenizer) - 1]])
reloaded = AutoModelForCausalLM.from_pretrained(merged)
assert (peft.merge_and_unload()(ids).logits - reloaded(ids).logits).abs().max() < 1e-5
adapter(tmp / "untrained", False)
try:
    job.merge_adapter(job.Source(tmp / "untrained", base), tmp / "merged-untrained")
except job.ConversionRefused as exc:
    print("REFUSED", exc)
"""
    out = subprocess.run(
        [sys.executable, "-c", code, str(SCRIPTS), str(tiny_model), str(tmp_path)],
        env=job_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    events = parse_events(out.stdout)
    assert next(e for e in events if e["event"] == "embeddings_resized")["adapter_rows"] == 802
    assert "REFUSED" in out.stdout and "modules_to_save" in out.stdout


def test_bundled_converter_facts_match_the_pinned_sdist() -> None:
    """gguf_converter.json is what the cached sdist's sources say (the job test fills the cache)."""
    if not SDIST.is_file():
        pytest.skip(f"no cached llama-cpp-python sdist at {SDIST} (the conversion test downloads it)")
    assert derive_converter_facts(SDIST) == json.loads(FACTS_FILE.read_text())


def test_the_job_reads_its_sources_as_the_server_reads_the_pinned_sdist() -> None:
    """One parser (scripts/_llama_cpp.py): the job's facts of the sources it extracted are the bundled ones."""
    if not (LLAMA_CPP_CACHE / f"sources-{LLAMA_CPP_PYTHON_VERSION}").is_dir():
        pytest.skip(f"no extracted llama.cpp sources in {LLAMA_CPP_CACHE} (the conversion test extracts them)")
    job = load_script_module("convert_gguf")
    facts = job.LlamaCppCache(LLAMA_CPP_CACHE, LLAMA_CPP_PYTHON_VERSION).facts
    assert facts == json.loads(FACTS_FILE.read_text())
    assert job.checked_quantizations(facts, ["q8_0", "F16", "Q4_K", "Q8_0"]) == ["Q8_0", "Q4_K_M"]
    with pytest.raises(job.ConversionRefused, match="no type Q9_Z"):
        job.checked_quantizations(facts, ["Q9_Z"])
    with pytest.raises(job.ConversionRefused, match="FancyNewForCausalLM"):
        job.require_supported_architecture(facts, {"architectures": ["FancyNewForCausalLM"]})
    job.require_supported_architecture(facts, {"text_config": {"architectures": ["Qwen2ForCausalLM"]}})
    job.check_pre_tokenizer(facts, "mpt")  # a name llama.cpp loads, though no hash of its own names it


def test_an_f16_only_conversion_builds_no_quantizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The F16 base comes from the converter alone: llama-quantize (minutes to build) only for other types."""
    job = load_script_module("convert_gguf")
    f16_only = conversion_config("/x/final", output_dir=tmp_path, cache_dir=tmp_path, quantizations=["F16", "f16"])
    assert f16_only["quantizations"] == [] and not job.needs_quantizer(f16_only["quantizations"])
    assert not job.needs_quantizer(["F16"]) and not job.needs_quantizer([" f16 "])
    assert job.needs_quantizer(["F16", "Q8_0"]) and job.needs_quantizer(["q4_k_m"])

    def no_build(*_: object) -> None:
        raise AssertionError("llama-quantize was built for an F16-only conversion")

    monkeypatch.setattr(job, "build_quantize", no_build)
    monkeypatch.setattr(job, "emit", lambda *_, **__: None)
    monkeypatch.setattr(job, "sha256_file", lambda _: "0" * 64)
    cache = job.LlamaCppCache(tmp_path, LLAMA_CPP_PYTHON_VERSION)
    monkeypatch.setattr(type(cache), "facts", property(lambda _: {"llama_cpp_commit": "abc"}))
    receipt = job.llama_cpp_tools(cache, build=False)
    assert receipt["quantize_sha256"] is None and receipt["build_seconds"] == 0 and receipt["commit"] == "abc"
