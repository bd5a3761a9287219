"""The libraries' own words for their failures, by family, and what each means for a retry. Pure.

The rules in `causes` read an exception by its type and where it was raised; many failures of a
fine-tuning stack are only told apart by the library's sentence (a ValueError from tokenization is a
missing pad token or a bad value, a TemplateError is a broken template or data that does not fit it).
Each signature below is the library's exact, stable wording for one failure, and holds for every job
that fails that way: `causes` tries them on every exception of the fatal chain, `classify` on loose log
lines when no traceback was kept.
"""

from __future__ import annotations

import re

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes import generic, libraries, metrics
from jobtrail.outcomes.signature import Signature, sig as _sig

__all__ = [
    "COLLECTIVE_TIMEOUT",
    "DISK_ERRNO",
    "DISK_FULL",
    "ILLEGAL_ACCESS",
    "SIGNATURES",
    "Signature",
    "disk_message",
    "match",
]


DISK = "The disk filled up (No space left on device)."
# The disk: errno 28 as Python, pip, safetensors (Rust's StorageFull), torch.save (a short write reads back as
# `unexpected pos`) and datasets/huggingface_hub (their check before a download) word it.
DISK_FULL = _sig(
    R.DISK_FULL,
    DISK,
    r"(?i:\bNo space left on device\b)",  # any case: Go's and Node's errors spell ENOSPC's text in lower case
    r"\bENOSPC\b",  # the errno by name (Node, libuv, C)
    r"(?i:\bThere is not enough space on the disk\b)",  # Windows' ERROR_DISK_FULL
    r"\[Errno 28\]",
    r"\bStorageFull\b",
    r"Not enough disk space\. Needed:",
    r"Not enough free disk space to download the file",
    r"unexpected pos \d+ vs \d+",
    r"PytorchStreamWriter failed writing file",
    r"The node was low on resource: ephemeral-storage",
    r"(?i:\bdisk quota exceeded\b)|\bEDQUOT\b|\[Errno 122\]",  # any case (TF's ResourceExhaustedError words it lower)
    r"ephemeral local storage usage exceeds",  # Kubernetes: the pod's own limit on its scratch disk
    # torch.save's writer reports the failed write(2) itself; an I/O error while writing a checkpoint is a full (or
    # failing) disk far more often than anything the job did.
    r"write\(\): fd \d+ failed with (?:No space left|Input/output error)",
)

# The disk's own words for being full (errno 28, a quota), as opposed to a short write (`unexpected pos`), which a
# process out of memory while writing also leaves.
DISK_ERRNO = re.compile(
    r"(?i:\bNo space left on device\b|\bdisk quota exceeded\b|\bnot enough space on the disk\b)|\[Errno (?:28|122)\]"
    r"|\bStorageFull\b|\bEDQUOT\b|\bENOSPC\b"
)

# A collective between GPUs that waited past its timeout. Alone it reads as a network or peer hiccup; `classify`
# makes it a timeout when the log shows one rank still preparing data before any step (the others waited for it).
COLLECTIVE_TIMEOUT = _sig(
    R.INFRA_TRANSIENT,
    "A collective operation between GPUs timed out (NCCL watchdog). If it recurs at the same step, one rank "
    "is stuck in long work of its own (data preparation, evaluation, saving on rank 0): raise ddp_timeout.",
    r"Watchdog caught collective operation timeout",
    r"ProcessGroupNCCL.*(?:timed out|Timeout)",
    r"NCCL (?:communicator|operation) .*timed? ?out",
)

# A CUDA kernel read or wrote outside its memory. Within a fine-tuning stack, at the start of a run, that is a native
# package's bug or a build for another CUDA/torch (flash-attn, bitsandbytes, a custom extension, an old toolkit): the
# fixes that close these threads are versions. (An out-of-range index is reported as a device-side assert instead.)
# Once training steps have run on the same kernels, an install is no longer the likely cause (`classify` says so).
ILLEGAL_ACCESS = _sig(
    R.DEPENDENCY_ERROR,
    "A CUDA kernel crashed (illegal memory access): most often a native package (flash-attn, bitsandbytes, a "
    "custom CUDA extension, the CUDA toolkit) with a bug or built for another torch/CUDA; update or match the "
    "versions. CUDA_LAUNCH_BLOCKING=1 shows which kernel.",
    r"an illegal memory access was encountered",
    r"cudaErrorIllegalAddress",
    r"CUDA_ERROR_ILLEGAL_ADDRESS",
)

SIGNATURES: list[Signature] = [
    DISK_FULL,
    _sig(
        R.DIVERGED,
        "The loss or the model's outputs became NaN/inf: training (or generation from it) cannot go on.",
        r"Current loss scale already at minimum",  # DeepSpeed's fp16 loss scaler gave up
        generic.LOSS_SCALE_COLLAPSED,  # or any scaler's scale at zero: every step overflows and is skipped
        r"probability tensor contains either `?inf`?, `?nan`? or element < 0",  # sampling from NaN logits
        r"Loss is (?:NaN|nan|inf)",
        r"Detected (?:NaN|nan|inf) (?:loss|in loss)",
        r"Function '\w+' returned nan values in its \d+th output",  # torch's anomaly detection, in the backward
    ),
    # A trainer's own log of its loss (`{'loss': nan, ...}`, `loss=nan` in a progress bar, `loss: inf`): as a loose line
    # it decides only when it is the newest step the log shows (`classify` passes over it when training went on).
    _sig(
        R.DIVERGED,
        "The loss was NaN/inf at the last step the log shows: training diverged (lower the learning rate, train in "
        "bf16 or fp32 rather than fp16, clip gradients).",
        # `'loss': nan`, `loss=nan`, `train_loss = inf`, litgpt's `loss nan,`, a printed `Loss: tensor(nan, ...)`, and a
        # loss's parts as detection and multi-task trainers log them (`'loss_cls': nan`, `lm_loss: inf`).
        metrics.NAN_LOSS,
        # The gradient norm, NaN at the newest step: the weights are being poisoned whatever the loss shows (a loss
        # of 0.0 follows).
        metrics.NAN_GRAD_NORM,
        metrics.NAN_LOSS_TENSOR,
    ),
    _sig(
        R.OOM,
        "The GPU had too little memory for vLLM's model and KV cache (lower max_model_len or raise "
        "gpu_memory_utilization, or use a bigger GPU).",
        r"larger than the maximum number of tokens that can be stored in KV cache",
        r"No available memory for the cache blocks",
        r"Insufficient memory for (?:the )?KV cache",
    ),
    _sig(
        R.OOM,
        "The job ran out of memory.",
        r"CUBLAS_STATUS_ALLOC_FAILED",
        r"(?i:CUDA error: out of memory)",  # the CUDA runtime's own wording (not the caching allocator's)
        r"cumem_allocator\.cpp",  # vLLM's sleep-mode allocator (its only failure there is an allocation)
        r"Some modules are dispatched on the CPU or the disk",  # a quantized model that does not fit the GPU
        r"Free memory on device .* is less than desired GPU memory utilization",  # vLLM: the GPU is already in use
        r"cudaErrorMemoryAllocation",
        r"\bOut of memory\b.*\b(?:CUDA|GPU|device)\b",
        r"HIP out of memory",
        # A DataLoader worker killed from outside: the host's memory (or /dev/shm) ran out under it.
        r"DataLoader worker \(pid.*\) is killed by signal: (?:Killed|Terminated|Bus error)",
    ),
    _sig(
        R.AUTH_ERROR,
        "The experiment tracker has no API key (set WANDB_API_KEY / log in, or report_to='none').",
        r"api_key not configured",
        r"wandb\.errors.*(?:AuthenticationError|UsageError).*(?:api[_ ]key|login|logged in)",
        r"(?:W&B|wandb).*(?:not logged in|Invalid API key|API key must be)",
        r"No API key configured",
        r"Error while calling W&B API: permission denied",  # a key without rights on the entity or project
    ),
    COLLECTIVE_TIMEOUT,
    # The GPU's hardware failed (its memory's ECC, or the card dropped off the bus): the job was fine, the machine was
    # not; another machine (or a reset of this one) runs it.
    _sig(
        R.INFRA_TRANSIENT,
        "The GPU had a hardware fault (an uncorrectable ECC error, or it fell off the bus and the driver lost it): "
        "retry on another machine; if it recurs on this one, the GPU needs a reset or replacing.",
        r"uncorrectable ECC error",
        r"cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE",
        r"GPU has fallen off the bus",
        # The driver no longer reaches the card: NVML (nvidia-smi, DCGM, a container's toolkit) and the kernel's Xid
        # codes for it (79: off the bus; 48, 94, 95: ECC; 119, 120: the GPU's own processor stopped answering).
        r"Unable to determine the device handle for GPU ?[\w:.]*: (?:Unknown Error|GPU is lost)",
        r"\bGPU is lost\b",
        r"Failed to initialize NVML: Unknown Error",
        r"\bNVRM: Xid \([^)]*\): (?:48|79|94|95|119|120)\b",
    ),
    # NCCL's own failure codes. Not "remote process exited": that is a rank's echo of a peer that died first.
    _sig(
        R.INFRA_TRANSIENT,
        "NCCL (the GPUs' communication) failed. Once, it is the network or a peer; if it recurs at start-up it is the "
        "machine's setup: shared memory (a container's --shm-size), the network interface (NCCL_SOCKET_IFNAME), "
        "peer-to-peer between GPUs (NCCL_P2P_DISABLE=1). NCCL_DEBUG=INFO says which.",
        r"NCCL error.*unhandled system error",
        r"\bnccl(?:SystemError|InternalError)\b",
    ),
    # NCCL's call into CUDA failed: not the network, and nothing in NCCL's report says which call or why (a driver,
    # CUDA and NCCL out of step, peer-to-peer between these GPUs, a GPU fault), so no reason can be named from it, and a
    # retry of the same setup is not known to help.
    _sig(
        R.UNKNOWN,
        "NCCL failed a CUDA call (unhandled cuda error): not the network, and the log does not say which call or why. "
        "Likely causes: the driver, CUDA and NCCL out of step, peer-to-peer between these GPUs (try "
        "NCCL_P2P_DISABLE=1), or a GPU fault. NCCL_DEBUG=INFO names the failing call.",
        r"NCCL error.*unhandled cuda error",
        r"\bncclUnhandledCudaError\b",
    ),
    _sig(
        R.CONFIG_ERROR,
        "The tokenizer has no pad token: set tokenizer.pad_token (e.g. to its eos_token) before padding.",
        r"Asking to pad but the tokenizer does not have a padding token",
        r"tokenizer does not have a pad(?:ding)? token",
    ),
    _sig(
        R.CONFIG_ERROR,
        "PEFT's target_modules name no module of this model (print the model to see its layer names).",
        r"Target modules?\b.*not found in the base model",  # PEFT prints the set with or without a space
        r"None of the target modules? .* (?:were|was) found",
    ),
    # PEFT's table of default LoRA targets has no entry for this model type (a remote-code or newer model): naming them
    # is the fix in the config; a newer PEFT may know the model too, which no log line can tell.
    _sig(
        R.CONFIG_ERROR,
        "PEFT has no default target_modules for this model type: name them in the LoRA config (print the model for "
        "its layer names), or use a PEFT release that knows the model.",
        r"Please specify `target_modules` in `peft_config`",
    ),
    _sig(
        R.CONFIG_ERROR,
        "The chat template itself is broken (a Jinja syntax error): fix or replace tokenizer.chat_template.",
        r"jinja2\.exceptions\.TemplateSyntaxError",
        r"^TemplateSyntaxError:",
    ),
    # A template's own raise_exception refusing the conversations' roles: the template (the tokenizer's config, which
    # a stage before may have saved) is what to change, not data in the common chat format.
    _sig(
        R.CONFIG_ERROR,
        "The model's chat template refuses these conversations' roles (alternation, a system message): use a "
        "template that accepts them (the base model's tokenizer_config, or chat_template=...), or merge the roles.",
        r"Conversation roles must alternate",
        r"System role not supported",
        r"jinja2\.exceptions\.TemplateError",
        r"^TemplateError: ",
    ),
    _sig(
        R.BAD_INPUT,
        "A conversation lacks a field the chat template reads (a message without 'role' or 'content').",
        r"jinja2\.exceptions\.UndefinedError",
        r"^UndefinedError: ",
    ),
    _sig(
        R.CONFIG_ERROR,
        "The processes of a distributed launch could not meet (rendezvous timed out): check MASTER_ADDR, "
        "MASTER_PORT, the number of nodes and that every node started.",
        r"DistStoreError",
        r"Rendezvous(?:Timeout|Connection)Error",
        r"The client socket has timed out after \d+",
    ),
    _sig(
        R.BAD_INPUT,
        "The data does not have the expected columns or types (a datasets cast failed).",
        r"DatasetGenerationCastError",
        r"\bCastError\b",
        r"Couldn't cast (?:array of type|\S+)",
        r"column names don't match",
        r"TextEncodeInput must be Union",  # tokenizers: a value that is not text (None, a number)
        r"TextInputSequence must be str",
    ),
    _sig(
        R.BAD_INPUT,
        "A label is outside the model's classes (negative, or not below num_labels): labels must be 0..n-1 "
        "(-100 is ignored).",
        # ATen's device-side assertion as CUDA prints it (`...`) and ROCm (`...'); `sig` lets its backticks go missing.
        r"(?i:assertion) `(?:cur_)?t(?:arget)? >= 0 && (?:cur_)?t(?:arget)? < n_classes[`']? failed",
        r"Target -?\d+ is out of bounds",
    ),
    _sig(
        R.CONFIG_ERROR,
        "A token id is beyond the model's embedding table: the tokenizer and the model do not match (added "
        "tokens need model.resize_token_embeddings).",
        r"(?i:assertion) `srcIndex < srcSelectDimSize[`']? failed",  # CUDA's and ROCm's, as above
    ),
    # A push that failed once the Hub had the files' upload started: S3's multipart refusal, git-lfs's, the Hub's answer
    # to a commit or preupload (not 401/403, which `causes` tells apart by progress; not 429, a rate limit).
    _sig(
        R.HUB_ERROR,
        "Uploading to the Hub failed (an LFS upload or the commit was refused); the saved files are intact: repeat "
        "the push (upload_folder / push_to_hub), in smaller commits for a large model. Where the Hub refused what the "
        "commit holds (the model card's metadata, a file type, a secret, a quota), fix what its message names first.",
        r"Your proposed upload is smaller than the minimum allowed size",
        r"\bEntityTooSmall\b",
        r"\bLFS: (?:Authorization|Client) error\b",
        # The Hub's LFS storage (its S3 buckets, path- or host-style) refusing an upload, in an HTTP client's words: the
        # URL is one the Hub signed for this push, so a 403 there is the storage's answer, not this token's rights.
        r"(?i:\b4(?!29)\d\d\b(?: Client Error|, message=| [a-z]+).{0,80}?\burl\b\W{1,8}(?:URL\(['\"])?https?://)"
        r"[\w.-]*?(?:amazonaws\.com/(?:lfs\.huggingface\.co|hf-hub-lfs[\w-]*)/|(?:lfs\.huggingface\.co|hf-hub-lfs[\w-]*)\.s3)",
        r"Error while uploading '[^']+' to the Hub",
        r"\b4(?!01|03|29)\d\d Client Error.*huggingface\.co/api/\S+/(?:commit|preupload)/",
        r"complete_multipart",
        # The Hub refusing what a commit holds: its model card's metadata (checked by the validate-yaml endpoint, or
        # first by the client), a file type, size or secret its checks reject, a storage quota.
        r"Bad request for commit endpoint",
        r"Invalid metadata in README\.md",
        r"Your push was rejected because",
        r"\b4\d\d Client Error.*huggingface\.co/api/validate-yaml",
    ),
    # A class from an optional dependency that a library imports only when the package is there (`if
    # is_peft_available(): from peft import PeftModel`): a NameError for it is the package missing or out of step.
    _sig(
        R.DEPENDENCY_ERROR,
        "A library used a class of an optional package that is not installed (or not the version it expects): "
        "install the package (peft, bitsandbytes, deepspeed, flash-attn...) at a version the library supports.",
        r"name ['\"\u2018\u2019](?:Peft\w*|Lora\w*|get_peft_model|prepare_model_for_\w+|bnb|deepspeed|amp|xm|wandb"
        r"|flash_attn\w*|unpad_input|pad_input)['\"\u2018\u2019] is not defined",
        r"the package flash_attn seems to be not installed",
        r"Loading a dataset cached in a LocalFileSystem is not supported",  # datasets older than its fsspec
        r"Error building extension '",  # a JIT-compiled op (DeepSpeed's, a kernel): compiler or CUDA toolkit mismatch
        r"Model architectures \[[^\]]*\] (?:are not supported for now|failed to be inspected)",  # vLLM too old
    ),
    # DDP's reducer: parameters unused in the loss, or used twice (gradient checkpointing's reentrant variant under
    # DDP); and autograd finding nothing to train (a frozen base under gradient checkpointing, no adapter attached).
    _sig(
        R.CONFIG_ERROR,
        "The backward pass does not fit the training setup: DDP found parameters unused (or marked ready twice, as "
        "reentrant gradient checkpointing does), or nothing in the loss requires grad. Set ddp_find_unused_parameters, "
        "gradient_checkpointing_kwargs={'use_reentrant': False}, or model.enable_input_require_grads() for adapters.",
        r"Expected to mark a variable ready only once",
        r"Expected to have finished reduction in the prior iteration",
        r"element 0 of tensors does not require grad and does not have a grad_fn",
    ),
    # The training setup asks for what the model, trainer or machine does not allow.
    _sig(
        R.CONFIG_ERROR,
        "The training arguments ask for something the model, trainer or machine does not allow; the message says "
        "which (match save and eval strategies, attach adapters to a quantized model, fp16 only on a GPU...).",
        r"You cannot perform fine-tuning on purely quantized models",
        r"load_best_model_at_end requires the save and eval strategy to match",
        r"fp16 mixed precision requires a GPU",
        r"Unable to create tensor, you should probably activate truncation and/or padding",
        r"Config name is missing\.",  # datasets: a dataset of several configs loaded without naming one
        r"^IndexError: index out of range in self",  # an embedding lookup past its table: a token id or position
    ),
    # The weights named are not there (a wrong path, a folder without the files) or do not fit the model.
    _sig(
        R.CONFIG_ERROR,
        "The model's files are not where the job looks, or do not fit the model (a wrong path or repo, a checkpoint "
        "for another base or vocabulary size): check the path and the base model.",
        r"Error no file named \S+.* found in directory",
        r"Can't load tokenizer for '",
        r"Can't find '(?:adapter_config|config)\.json' at '",
        r"Error\(s\) in loading state_dict for \w+",
        r"size mismatch for \S+: copying a param with shape",
    ),
    # Before the llama.cpp and loader signatures below, whose words a pointer file also provokes.
    generic.CORRUPT_FILE,
    # A distributed launch whose rendezvous port is taken (another job on the node, a launch that did not exit).
    _sig(
        R.CONFIG_ERROR,
        "The launcher's port is taken (Address already in use): another job uses MASTER_PORT on this node; pick "
        "another port (--main_process_port / --master_port) or end the old launch.",
        r"The server socket has failed to (?:listen|bind).*Address already in use",
        r"\bEADDRINUSE\b",
    ),
    # A scheduler that refused the job at submission (its QOS, account or limits): nothing ran.
    _sig(
        R.CONFIG_ERROR,
        "The scheduler refused the job at submission (its QOS, account, partition or limits): change the request "
        "(time, GPUs, partition, account) to what the policy allows.",
        r"Job violates accounting/QOS policy",
        r"Batch job submission failed",
        r"Unable to allocate resources: (?:Invalid|Requested|Job violates)",
    ),
    # llama.cpp's tools check their own positional arguments (`main: invalid nthread 'Q8_0' (stoi)`, `main: invalid
    # ftype`), and its common parser its options (`error: invalid argument: --foo`): a command line out of order.
    _sig(
        R.CONFIG_ERROR,
        "A llama.cpp tool rejected its command line (an argument out of order, an unknown option or a bad value): "
        "check the tool's usage (quantize: model-in model-out type [nthreads]).",
        r"\bmain: invalid (?:nthread|ftype|type|argument|parameter|option)s? '",
        r"^error: (?:unknown|invalid) argument: ",
    ),
    # torch's GradScaler refuses parameters that are themselves fp16: the trainable weights were cast to half under
    # fp16 mixed precision (load them in fp32, or train in bf16).
    _sig(
        R.CONFIG_ERROR,
        "fp16 mixed precision was given fp16 trainable weights (the grad scaler cannot unscale them): keep the "
        "trainable parameters in fp32 (torch_dtype=float32 for what trains, or LoRA on a half base), or use bf16.",
        r"(?i)Att?emp?ting to unscale FP16 gradients",
    ),
    # DeepSpeed checks its batch sizes against each other and the world size: a config that does not add up.
    _sig(
        R.CONFIG_ERROR,
        "DeepSpeed's batch sizes do not add up (train_batch_size must equal micro batch x gradient accumulation x "
        "GPUs): set them to 'auto' in the DeepSpeed config, or make them agree.",
        r"Check batch related parameters\. train_batch_size is not equal to",
    ),
    # The data reached the trainer empty (a wrong path or split, or filters that dropped every sample): torch's
    # RandomSampler, and the train/test split of datasets and scikit-learn, say so in these words.
    _sig(
        R.BAD_INPUT,
        "The dataset is empty (no sample found, or every sample filtered out): check the data path and split, and "
        "the filters (length limits, formatting) that drop samples.",
        r"num_samples should be a positive integer value, but got num_samples=0\b",
        r"With n_samples=0, test_size=",
        # Drawing a random sample from data of no length (a batch index below len(data), or below len(data) minus a
        # block): torch's, Python's and numpy's words for a range or population that is empty.
        r"random_ expects 'from' to be less than 'to', but got from=0 >= to=(?:0|-\d+)\b",
        r"empty range (?:for|in) randrange\(",
        r"Cannot choose from an empty sequence",
        r"'?a'? cannot be empty unless no samples are taken",
    ),
    _sig(
        R.DEPENDENCY_ERROR,
        "A package failed to build or install.",
        r"metadata-generation-failed",
        r"Failed building wheel for",
        r"Could not build wheels for",
        r"error: subprocess-exited-with-error",
        r"CUDA_HOME does not exist",
        r"Failed to find C compiler",  # triton compiles its kernels at run time: no gcc/cc on the machine
        r"MissingCUDAException",
        r"Could not find a version that satisfies the requirement",
        # A native extension built at install or run time (DeepSpeed's ops, flash-attn, bitsandbytes, apex, a custom
        # kernel) failing at compile or link: the linker missing a CUDA library, nvcc or ninja giving up, a header of
        # the toolkit absent, a compiler the toolkit does not accept.
        r"\bld(?:\.\w+)?: cannot find -l\w+|collect2: error: ld returned \d+ exit status",
        r"ninja: build stopped: subcommand failed",
        r"\bnvcc fatal\b|nvcc\S* failed with exit code \d+",
        r"fatal error: [\w/.+-]+\.(?:h|hpp|cuh): No such file or directory",
        r"#error -- unsupported (?:GNU|clang|Microsoft Visual Studio) version",
        r"error: command '[^']*(?:gcc|g\+\+|c\+\+|cc|nvcc|cl\.exe|clang\+*)' failed with exit (?:code|status) \d+",
    ),
    _sig(
        R.CONFIG_ERROR,
        "llama.cpp's GGUF converter does not support this model's architecture or one of its tensors.",
        r"Architecture '?[\w.]+'? not supported",
        r"Model \S+ is not supported",
        r"Can not map tensor",
        r"Unsupported (?:model )?architecture",
    ),
    _sig(
        R.DEPENDENCY_ERROR,
        "The installed package is older than the code using it (update it to the version the code expects).",
        # gguf-py older than the llama.cpp converter it ships with (PyPI's gguf for the checkout's): one project's
        # parts out of step, an install. Another project's module without the name is an API mismatch (`libraries`).
        r"type object 'MODEL_(?:ARCH|TENSOR)' has no attribute",
        r"module 'gguf(?:\.\w+)*' has no attribute '\w+'",
        r"data did not match any variant of untagged enum",  # tokenizers older than the tokenizer.json
        r"unknown model architecture: '",  # llama.cpp (quantize, load) older than the GGUF
        r"no kernel image is available for execution on the device",
    ),
    # bitsandbytes that loaded its CPU-only library (no CUDA found, or a build for another CUDA): its GPU functions are
    # missing, which it says in a warning and then as an AttributeError or undefined symbol.
    _sig(
        R.DEPENDENCY_ERROR,
        "bitsandbytes has no GPU library for this machine (it loaded its CPU build): install a bitsandbytes built for "
        "this CUDA, or check that CUDA is visible (torch.cuda.is_available()).",
        r"bitsandbytes was compiled without GPU support",
        r"(?:has no attribute|undefined symbol:?|function) '?c\w+32bit_grad_fp32",
        r"CUDA Setup failed despite GPU being available",
    ),
    # The GPU driver predates the CUDA runtime torch (or a container) was built with: torch says so at its first CUDA
    # call, often only as a warning before the job fails (or runs on the CPU).
    _sig(
        R.DEPENDENCY_ERROR,
        "The GPU driver is older than the CUDA runtime this build of torch (or the container) needs: update the "
        "driver, or install a torch built for the CUDA version the driver supports (nvidia-smi shows it).",
        r"NVIDIA driver on your system is too old",
        r"CUDA driver version is insufficient for CUDA runtime version",
        r"cudaErrorInsufficientDriver",
        r"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|system has unsupported display driver / cuda driver combination",
    ),
    ILLEGAL_ACCESS,
    _sig(
        R.CONFIG_ERROR,
        "llama.cpp's quantizer refused the model (the quant type does not fit its tensors, or the input is not "
        "a GGUF it can read).",
        r"failed to quantize",
        r"llama_model_quantize: ",
    ),
    _sig(
        R.CONFIG_ERROR,
        "The model does not fit the device or precision it was given.",
        r"Bfloat16 is only supported on GPUs with compute capability",
        r"FlashAttention only supports (?:Ampere|Turing)",  # flash-attn on an older GPU: use sdpa attention
        # A feature the GPU cannot run, by what it requires (a server's sharded model needing Flash Attention, a
        # kernel needing a compute capability): the hardware does not fit the setting, by DESIGN.md a config_error.
        r"(?i:\brequires Flash ?Attention(?: v?2)? enabled models\b)",
        r"(?i:\brequires? (?:a )?(?:GPU|device|card)s? with (?:a )?(?:compute )?capability\b)",
        r"(?i:\bcompute capability (?:of )?(?:at least|>= ?)\s?\d)",
        r"\bMinimum capability: \d+\.? ?Current capability: \d+",  # vLLM's quantization methods
        r"can't train a model that has been loaded in 8-bit precision on a different device",
        r"Expected all tensors to be on the same device",
        r"does not appear to have a file named (?:config\.json|pytorch_model\.bin|model\.safetensors)",
    ),
    # The wider sweep of the stack's wordings, after these (which stay first where both match), then the words any
    # runtime uses for a failure of these kinds.
    *libraries.SIGNATURES,
    *generic.SIGNATURES,
]


def match(line: str) -> Signature | None:
    """The first signature the line carries."""
    return next((s for s in SIGNATURES if s.pattern.search(line)), None)


# The path written to: Python's OSError names it after the errno's words; Go's PathError (`write /x/y: no space left
# on device`) and others name it after the call.
_PATH = re.compile(
    r"No space left on device: '(?P<path>[^']+)'|(?:to|at|in|write|open|create|mkdir|rename) (?P<path2>/[\w./-]+)"
)
_NEEDED = re.compile(
    r"Needed: (?P<needed>[\d.]+ ?[KMGT]i?B)"
    r"|expected file size is: (?P<size>[\d.]+ ?[KMGT]B)\. The target location (?P<where>\S+) only has "
    r"(?P<free>[\d.]+ ?[KMGT]B) free"
)


def disk_message(lines: list[str]) -> str:
    """DISK, with the path that filled and how much was needed, where the log says so."""
    path = needed = free = None
    for line in lines:
        if not DISK_FULL.pattern.search(line) and not _NEEDED.search(line):
            continue
        if (found := _PATH.search(line)) and not path:
            path = found["path"] or found["path2"]
        if amount := _NEEDED.search(line):
            needed = amount["needed"] or amount["size"]
            path, free = path or amount["where"], amount["free"]
    details = [f"writing to {path}" if path else "", f"{needed} needed" if needed else ""]
    details.append(f"{free} free" if free else "")
    said = ", ".join(d for d in details if d)
    return (
        f"The disk filled up (No space left on device{': ' + said if said else ''}). Free space (delete old "
        "checkpoints, set save_total_limit, clear the cache) or use a bigger disk, then retry."
    )
