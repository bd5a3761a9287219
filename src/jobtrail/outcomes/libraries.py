"""More of the libraries' own words for their failures, by family: the fatal errors users of each library report most
(transformers, trl, peft, accelerate, datasets, huggingface_hub, bitsandbytes, deepspeed, torch and NCCL, vLLM,
llama.cpp, unsloth, axolotl, LLaMA-Factory, pip, extension builds). Pure.

`families` tries these after its own signatures, on every exception of the fatal chain and on loose lines. Each is a
stable fragment of a library's raise statement (not one job's message), with the reason it means for every job that
prints it; tests/outcomes/test_families_catalogue.py holds a line in the shape of each.
"""

from __future__ import annotations

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.signature import Signature, sig as _sig

MODEL_MISSING = "The model (or revision) does not exist on the Hub, or is not visible to this token."
API_CHANGED = (
    "The code uses a name that the installed release of the module it names does not have (renamed, moved or removed "
    "between releases, or not there yet): change the code to this release's API, or install the release the code was "
    "written for."
)

SIGNATURES: list[Signature] = [
    # transformers' and huggingface_hub's words for a model name or revision the Hub does not have: a wrong argument
    # (config_error), whether a traceback came with them or not.
    _sig(
        R.CONFIG_ERROR,
        MODEL_MISSING,
        r"is not a local folder and is not a valid model identifier",
        r"is not a valid git identifier",
    ),
    # Tensors of two precisions meeting in one op: bf16 asked of a GPU without it (a T4 computes in fp16, the adapter in
    # bf16), fp16 weights on the CPU, an input left in fp32. The fix is the precision setting, not a package.
    _sig(
        R.CONFIG_ERROR,
        "Tensors of different precisions met in one operation (bf16 and fp16, or half precision on the CPU): make "
        "the dtype settings agree (bf16 only on GPUs that support it, else fp16=True/bf16=False; fp32 on the CPU).",
        r"expected mat1 and mat2 to have the same dtype",
        r"expected scalar type (?:Half|BFloat16|Float) but found (?:Half|BFloat16|Float)",
        r"Input type \(\S+\) and (?:bias|weight) type \(\S+\) should be the same",
        r"\"\w+\" not implemented for '(?:Half|BFloat16)'",  # `"addmm_impl_cpu_" not implemented for 'Half'`
        r"Flash ?Attention(?: 2(?:\.0)?)? only supports? torch\.float16 and torch\.bfloat16",
    ),
    # The processes of a launch and the GPUs do not match: two ranks on one GPU, a GPU index past those visible.
    _sig(
        R.CONFIG_ERROR,
        "The launch does not match the GPUs visible: two ranks were put on one GPU, or a rank asked for a GPU index "
        "that is not there. Match --num_processes / --nproc_per_node to the GPUs, and check CUDA_VISIBLE_DEVICES.",
        r"Duplicate GPU detected : rank \d+ and rank \d+ both on CUDA device",
        r"CUDA error: invalid device ordinal",
        r"Cannot re-initialize CUDA in forked subprocess",
    ),
    # Trainer computed no loss, and the inputs it lists (transformers names them) hold no labels: the batches reached
    # the model without targets, so the dataset has no `labels` column (a `label` one, or none: causal LM data takes its
    # labels from a collator), or the collator or remove_unused_columns dropped it. With labels among the inputs, a
    # model class without a loss head is what is wrong (the next signature).
    _sig(
        R.BAD_INPUT,
        "The batches reached the model without labels (the inputs it received name none), so it computed no loss: give "
        "the dataset a `labels` column (rename `label`; for causal LM use a collator that makes labels, such as "
        "DataCollatorForLanguageModeling(mlm=False)), and check that remove_unused_columns did not drop it.",
        r"The model did not return a loss from the inputs, only the following keys: .*For reference, the inputs it "
        r"received are (?![^\n]*(?:label|start_positions))",
    ),
    # A setting the trainer or framework refuses before training starts: its own message says which one.
    _sig(
        R.CONFIG_ERROR,
        "The trainer refused a combination of settings before training started; its message names the setting "
        "(an eval dataset for evaluation, a text field or formatting function, batch sizes that divide, a checkpoint "
        "path that exists, device_map under distributed training...).",
        r"Trainer: evaluation requires an eval_dataset",
        r"but you didn't pass a `?dataset_text_field`? or `?formatting_func`? argument",
        r"must be evenly divisible by the number of generations per prompt",  # TRL's GRPO
        r"Can't find a valid checkpoint at ",
        r"You can't train a model that has been loaded with `device_map='auto'` in any distributed mode",
        r"You can't use same `Accelerator\(\)` instance with multiple models when using DeepSpeed",
        r"no_sync context manager is incompatible with gradient partitioning logic of ZeRO stage",
        r"The model did not return a loss from the inputs, only the following keys",  # with labels: no loss head
        r"Input length of input_ids is \d+, but `max_length` is set to \d+",
        r"Untrained tokens of .* found, but embed_tokens & lm_head not trainable",  # unsloth
        r"Please set lora_modules_to_save to",  # axolotl: new special tokens need trainable embeddings
        r"Please set --\w+ <",  # ms-swift's CLI: a required argument missing (2.x names on 3.x)
        r"unhandled prompt tokenization strategy",  # axolotl
        r"Target module \S+ is not supported\. Currently, only the following modules are supported",  # PEFT
        r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len",  # vLLM
        r"Total number of attention heads \(\d+\) must be divisible by tensor parallel size",  # vLLM
        r"Please launch distributed training with `llamafactory-cli` or `torchrun`",
        r"Undefined dataset \S+ in dataset_info\.json",  # LLaMA-Factory
        r"Cannot open \S*dataset_info\.json",
        r"^ValueError: Template \S+ does not exist",
        r"Unsloth: Your GPU is too old",
    ),
    # A config file or object validated by pydantic (axolotl's, and other trainers' YAML): a field of a wrong type or
    # name. Only for classes named as configs or arguments: pydantic validating data rows is the data's problem.
    _sig(
        R.CONFIG_ERROR,
        "The training config failed validation (a field of the wrong type, a missing or unknown field): the error "
        "lists each field and what it expects.",
        r"\d+ validation errors? for \w*(?:Config|Args|Arguments|Settings|Capabilities)\w*\b",
    ),
    # A model or file named that is not there: a local path that does not exist (huggingface_hub then reads it as a
    # repo id and refuses it), a file the repo does not have, a model folder without its config.
    _sig(
        R.CONFIG_ERROR,
        "The model path or file named does not exist (a local path that is not there is read as a Hub repo id), or "
        "the repo lacks the file: check the path, and that the folder holds the model's files.",
        r"Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
        r"\bEntryNotFoundError\b",
    ),
    # A model file that is not in the format the tool reads (an old GGML file given to a GGUF llama.cpp).
    _sig(
        R.CONFIG_ERROR,
        "The model file is not in a format llama.cpp reads (an old GGML file, or not a GGUF at all): convert it to "
        "GGUF with the current converter.",
        r"unknown \(magic, version\) combination",
        r"gguf_init_from_file: invalid magic",
    ),
    # llama.cpp's backends allocating the model or its context on the GPU.
    _sig(
        R.OOM,
        "The GPU had too little memory for the model and its context (offload fewer layers, use a smaller context or "
        "quantization).",
        r"cudaMalloc failed: out of memory",
        r"failed to allocate \w+ buffer of size",
    ),
    # The data reached the trainer empty or without the columns it needs: every row filtered out, a split that is
    # not there, a preprocessing that kept no sample.
    _sig(
        R.BAD_INPUT,
        "The dataset is empty or lacks what the trainer reads (every sample filtered out, no columns left, no valid "
        "sample in the expected format): check the data's format, path and split, and the filters that drop samples.",
        r"Current columns in the dataset: \[\]",
        r"Cannot find valid samples, check `?data/README\.md`? for the data format",  # LLaMA-Factory
        r"Column lengths mismatch: columns",
        r"^ValueError: Unknown split \"\w+\"\. Should be one of",
        r"Couldn't infer the same data file format for all splits",
        r"\bNonMatchingSplitsSizesError\b",
    ),
    # Builds of native code (a JIT-compiled op, a wheel from source): the compiler, the CUDA toolkit or the headers do
    # not fit torch; no setting of the job changes that.
    _sig(
        R.DEPENDENCY_ERROR,
        "Compiling a native extension failed (a DeepSpeed op, a CUDA kernel, a wheel from source): the CUDA toolkit, "
        "compiler or headers do not fit this torch. Install a prebuilt wheel, or a toolkit and compiler matching "
        "torch's CUDA version.",
        r"ninja: build stopped: subcommand failed",
        r"^nvcc fatal\s*:",
        r"DeepSpeed Op Builder: Installed CUDA version \S+ does not match the version torch was compiled with",
        r"\bCUDAMismatchException\b",
        r"The detected CUDA version \(\S+\) mismatches the version that was used to compile",
        r"fatal error: (?:Python|cuda_runtime|cuda_fp16|cublas_v2)\.h: No such file or directory",
        r"unsupported GNU version! gcc versions later than",
        r"error: command '[^']*(?:nvcc|gcc|g\+\+|c\+\+|cl\.exe)' failed with exit (?:code|status)",
    ),
    # bitsandbytes finding no library for this CUDA (its setup's own banner), and the native errors of its kernels.
    _sig(
        R.DEPENDENCY_ERROR,
        "bitsandbytes could not load a GPU library for this machine's CUDA: install a bitsandbytes built for this CUDA "
        "version (or set BNB_CUDA_VERSION / LD_LIBRARY_PATH to the toolkit it needs).",
        r"CUDA SETUP: Setup Failed!",
        r"CUDA SETUP: CUDA detection failed",
        r"CUDA SETUP: Required library version not found",
        r"Could not load bitsandbytes native library",
        r"CUDA Setup failed despite (?:GPU|CUDA) being available",
        r"Error invalid (?:configuration argument|device function) at line \d+ in file \S*csrc/ops\.cu",
    ),
    # torch (or a library on it) that cannot reach CUDA: a CPU-only wheel, no driver, a kernel built for another
    # toolchain. The GPU is the machine's; the software installed does not use it.
    _sig(
        R.DEPENDENCY_ERROR,
        "The installed torch cannot use the GPU (a CPU-only build, no NVIDIA driver, a build for another CUDA "
        "toolchain, or one without kernels for this GPU's architecture, newer or older than the build supports): "
        "install a torch wheel built for this machine's CUDA, driver and GPU.",
        r"Torch not compiled with CUDA enabled",
        # The build has no kernels for this GPU's compute capability (torch's warning at its first CUDA call, then the
        # job fails or runs on the CPU): a GPU newer than the build (Blackwell's sm_120 under a cu12.4 torch), or older.
        r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation",
        r"PyTorch no longer supports this GPU because it is too old",
        r"The minimum required Cuda capability is \d",  # TensorFlow ignoring the GPU for the same reason
        r"Found no NVIDIA driver on your system",
        r"the provided PTX was compiled with an unsupported toolchain",
        r"Unsloth: No NVIDIA GPU found\? Unsloth currently only supports GPUs",
        r"Unsloth currently only works on NVIDIA",
        r"No operator found for `memory_efficient_attention_\w+`",  # xformers built for another torch/CUDA
    ),
    # A kernel checking the GPU's architecture before it runs (FlashAttention's `TORCH_CHECK(is_sm90 || is_sm8x)`, a
    # fused or quantized kernel's compute-capability check, Triton's and ptxas' refusal of a dtype the target lacks):
    # the GPU cannot run the setting whatever is installed (round 11's policy), not a torch build without its kernels.
    _sig(
        R.CONFIG_ERROR,
        "A kernel the job uses (FlashAttention, a fused or quantized kernel, a Triton kernel in bf16 or fp8) does not "
        "run on this GPU's architecture: turn the feature off (attn_implementation='sdpa' or 'eager', no flash patch, "
        "fp16 instead of bf16) or run on a GPU it supports.",
        r"\bExpected [^\n]*?(?:\bis_sm\d+[a-z]?|(?:props|prop|Properties\(\))->major|compute_?capability"
        r"|\b(?:sm|cc)_(?:major|version))\b[^\n]*? to be true, but got false",
        r"(?i:\bcompute capability (?:of )?\(?\d+(?:\.\d+|, ?\d+)?\)? or (?:higher|above|newer|later|greater)\b)",
        r"(?i:\brequires? (?:an? )?(?:NVIDIA )?(?:(?:[AH][18]00|H200)\b"
        r"|(?:Ampere|Hopper|Ada|Blackwell)(?: or newer)? (?:GPU|architecture|card)s?\b))",
        r"\bFeature '\.\w+' requires \.target sm_\d+ or higher\b",
        r"\btype fp8\w* not supported in this architecture\b",
    ),
    # A library, model or format newer than the installed release of what reads it; and pip's resolver giving up.
    _sig(
        R.DEPENDENCY_ERROR,
        "The installed packages are too old for what the job asks, or cannot be installed together: update the "
        "package the message names (or pin versions that resolve).",
        r"Unknown quantization type, got \S+ - supported types are",  # transformers older than the checkpoint
        r"Tokenizer class \w+ does not exist or is not currently imported",
        r"is not supported in your current Unsloth version",
        r"Unsloth: \S+ not supported yet!",
        r"model_type: '[^']+' is not registered",  # ms-swift older than the model
        r"BPE pre-tokenizer was not recognized",  # llama.cpp's converter older than the model's tokenizer
        r"PEFT is not installed and you passed a `peft_config`",
        r"DeepSpeed is not installed => run `pip install deepspeed`",
        r"\bResolutionImpossible\b",
        r"because these package versions have conflicting dependencies",
    ),
    # Data the loader cannot read: one data file with other columns than the rest, an image file cut short or not an
    # image at all (PIL, under datasets' Image feature or a torchvision ImageFolder).
    _sig(
        R.BAD_INPUT,
        "A data file cannot be read as the rest are: its columns differ from the other files', or an image in it is "
        "truncated or not an image. Fix or drop that file (the message names it).",
        r"All the data files must have the same columns",
        r"image file is truncated",
        r"cannot identify image file",
    ),
    # datasets 4 dropped loading scripts: the call is of an API the installed release no longer has.
    _sig(
        R.CONFIG_ERROR,
        "The dataset is a loading script, which datasets 4 no longer runs: use a version of the dataset in data "
        "files (Parquet/JSON, often on the repo's refs/convert/parquet branch), or a datasets release before 4.0.",
        r"Dataset scripts are no longer supported",
    ),
    # Megatron's check of the gradients before they are reduced across ranks.
    _sig(
        R.DIVERGED,
        "A gradient norm became NaN/inf in the backward pass: training diverged (lower the learning rate, clip "
        "gradients, train in bf16 rather than fp16).",
        r"found NaN in (?:local )?grad norm",
        r"Unexpected result nan",
    ),
    # unsloth's GGUF export (and any exporter) runs llama.cpp's binaries from a clone it expects to be built: the binary
    # is not there, in the exporter's words or the shell's.
    _sig(
        R.DEPENDENCY_ERROR,
        "llama.cpp's quantize tool is not there: the llama.cpp checkout was not built (run its build: cmake/make), "
        "or the binary's name changed in that release.",
        r"The file '\S*quantize' or '\S*quantize' does not exist",
        r"\bNo working quantizer found in\b",
        r"(?:^|[\s/'\"])llama-(?:quantize|cli|gguf-split)(?:\.exe)?['\"]?: "
        r"(?:command not found|not found|No such file)",
    ),
    # A program calling a function another project's module does not have in the installed release (renamed, moved or
    # removed since the program was written, or not there yet): an API mismatch, DESIGN.md's config_error whatever fixes
    # it. Not a module caught half-imported (a file shadowing the package), and not gguf-py (`families`).
    _sig(R.CONFIG_ERROR, API_CHANGED, r"(?<!partially initialized )\bmodule '[\w.]+' has no attribute '\w+'"),
    # An API the job calls (an LLM judge, an evaluation's model server, a provider) refusing its key, as the client
    # prints the response: the OpenAI-compatible SDKs' `Error code: 401 - {...}` and their error body's code,
    # Anthropic's `authentication_error`, Google's `API key not valid`; whatever exception or log line wraps it.
    _sig(
        R.AUTH_ERROR,
        "An API the job calls (a judge model, an evaluation's endpoint, a provider) refused its key (wrong, revoked or "
        "expired): set a valid key where the tool reads it (OPENAI_API_KEY or the tool's own setting), then rerun.",
        r"\bError code: 40[13] - ",
        r"['\"](?:code|type)['\"]: ['\"](?:invalid_api_key|authentication_error|invalid_authentication)['\"]",
        r"\bIncorrect API key provided\b|\bAPI key not valid\. Please pass a valid API key\b|\binvalid x-api-key\b",
    ),
    # A client's own exception type for credentials refused or missing (OpenAI's and Anthropic's AuthenticationError and
    # PermissionDeniedError, Azure's ClientAuthenticationError, botocore's NoCredentialsError, google-auth's
    # DefaultCredentialsError, an HTTP client's Unauthorized), as the exception's line names it, whatever its message
    # says. Not multiprocessing's AuthenticationError (two of the job's processes failing their handshake), nor code
    # naming the type (`except AuthenticationError:`).
    _sig(
        R.AUTH_ERROR,
        "A service the job calls refused its credentials, or found none (the client's authentication error): set valid "
        "credentials where the client reads them (its API key or token variable, its login, the cloud's credentials "
        "file), then rerun.",
        r"(?<![\w.])(?!multiprocessing\.)(?:[A-Za-z_]\w*\.)*(?:\w*Authenticat(?:ion|e)\w*(?:Error|Exception|Failed)"
        r"|\w*Unauthori[sz]ed(?:Error|Exception)?|Unauthenticated(?:Error|Exception)?|PermissionDenied(?:Error)?"
        r"|\w*Credentials?(?:Error|Exception)|\w*(?:ApiKey|APIKey)\w*(?:Error|Exception))(?:: \S|\s*$)",
    ),
    # verl's rule-based rewards (and its forks'), chosen by each row's `data_source`: an empty one is the data's (the
    # preprocessing that writes it was skipped, or the column lost); one they do not know needs a reward function.
    _sig(
        R.BAD_INPUT,
        "The data's rows have no data_source (the field is empty), so no reward function could be chosen for them: "
        "prepare the data with the preprocessing that writes data_source (it names the dataset, such as openai/gsm8k), "
        "or keep the column when converting it.",
        r"\bnot (?:implemented|supported|found) for data_?source\s*[=:]?\s*(?:''|\"\"|None)?\s*$",
    ),
    _sig(
        R.CONFIG_ERROR,
        "No reward function is known for the data_source the rows name: pass a reward function for this data "
        "(verl: custom_reward_function.path and .name), or give the rows a data_source the built-in rewards know.",
        r"\b(?:Reward|reward|score|Score)\w* (?:function )?(?:is )?not (?:implemented|supported|found) for "
        r"data_?source\s*[=:]?\s*['\"]?\w",
    ),
    # A person stopped the job with Ctrl-C (Python's KeyboardInterrupt alone on its line, Julia's InterruptException):
    # no failure of the job, and nothing to retry. `causes` reads Python's as the fatal exception itself.
    _sig(
        R.CANCELLED,
        "The job was interrupted (Ctrl-C, SIGINT): someone stopped it; nothing failed.",
        r"^KeyboardInterrupt\s*$",
        r"^(?:ERROR: )?InterruptException:",
    ),
]
