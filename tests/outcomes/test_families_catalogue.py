"""A catalogue of the fatal wordings of the libraries and schedulers a fine-tuning job runs, each named.

Rules written against the logs in real_logs/ named 72-78% of fresh logs right: a fresh log's misses were mostly
families no rule knew yet. This catalogue goes the other way: library by library (transformers, trl, peft,
accelerate, datasets, tokenizers, huggingface_hub, bitsandbytes, deepspeed, torch and NCCL, vLLM, llama.cpp, wandb,
safetensors, jinja2 chat templates) and scheduler by scheduler (SLURM, Kubernetes, shells, HF Jobs), the errors users
commonly hit, in the shape each is printed (a made-up minimal line, or a short traceback where the frames decide),
with the reason each must get. A wording the classifier does not name fails here, not on a user's job.
"""

# The wordings are quoted whole, as the libraries print them: a line is as long as its message.
# ruff: noqa: E501
from __future__ import annotations

import pytest

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.classify import explain

SITE = "/usr/lib/python3.11/site-packages"


def _tb(error: str, *frames: str) -> str:
    """A traceback ending in `error`, raised through `frames` (paths under site-packages, or the user's script)."""
    lines = ["Traceback (most recent call last):", '  File "/job/train.py", line 10, in <module>']
    for frame in frames:
        path, _, function = frame.partition(":")
        lines.append(f'  File "{SITE}/{path}", line 1, in {function or "f"}')
    return "\n".join([*lines, error])


# (library or scheduler, the log as printed, the reason) - rows alike by design.
CATALOGUE: list[tuple[str, str, R]] = [
    # transformers
    (
        "transformers",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 1 GiB free",
        R.OOM,
    ),
    (
        "transformers",
        "ValueError: Asking to pad but the tokenizer does not have a padding token. Please select a token",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "OSError: acme/llama-x is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "ValueError: The checkpoint you are trying to load has model type `qwen9` but Transformers does not recognize this architecture.",
        R.DEPENDENCY_ERROR,
    ),
    (
        "transformers",
        _tb("KeyError: 'qwen9'", "transformers/models/auto/configuration_auto.py:__getitem__"),
        R.DEPENDENCY_ERROR,
    ),
    (
        "transformers",
        "ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "ImportError: Using `bitsandbytes` 4-bit quantization requires the latest version of bitsandbytes: `pip install -U bitsandbytes`",
        R.DEPENDENCY_ERROR,
    ),
    (
        "transformers",
        "ImportError: Using the `Trainer` with `PyTorch` requires `accelerate>=0.26.0`: Please run `pip install transformers[torch]`",
        R.DEPENDENCY_ERROR,
    ),
    (
        "transformers",
        "ValueError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: the package flash_attn seems to be not installed.",
        R.DEPENDENCY_ERROR,
    ),
    (
        "transformers",
        "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:\n\tsize mismatch for lm_head.weight: copying a param with shape torch.Size([32001, 4096])",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, model.ckpt.index or flax_model.msgpack found in directory /out/ckpt.",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "ValueError: You cannot perform fine-tuning on purely quantized models. Please attach trainable adapters on top of the quantized model",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "ValueError: --load_best_model_at_end requires the save and eval strategy to match, but found\n- Evaluation strategy: IntervalStrategy.NO",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "OSError: Can't load tokenizer for 'acme/llama-x'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "ValueError: Unable to create tensor, you should probably activate truncation and/or padding with 'padding=True' 'truncation=True' to have batched tensors with the same length.",
        R.CONFIG_ERROR,
    ),
    ("transformers", "IndexError: index out of range in self", R.CONFIG_ERROR),
    # trl
    ("trl", "TypeError: SFTTrainer.__init__() got an unexpected keyword argument 'dataset_text_field'", R.CONFIG_ERROR),
    (
        "trl",
        _tb("NameError: name 'PeftModel' is not defined", "trl/trainer/sft_trainer.py:__init__"),
        R.DEPENDENCY_ERROR,
    ),
    ("trl", "name 'PeftModel' is not defined", R.DEPENDENCY_ERROR),
    ("trl", _tb("KeyError: 'prompt'", "datasets/arrow_dataset.py:map"), R.BAD_INPUT),
    # peft
    (
        "peft",
        "ValueError: Target modules {'q_proj', 'v_proj'} not found in the base model. Please check the target modules and try again.",
        R.CONFIG_ERROR,
    ),
    ("peft", "ValueError: Please specify `target_modules` in `peft_config`", R.CONFIG_ERROR),
    # PEFT 0.21 raises its own class, and prints one string of target_modules as it is ("q_proj,v_proj": one regex).
    (
        "peft",
        _tb(
            "peft.utils.error.NoMatchingPeftModuleError: Target modules q_proj,v_proj not found in the base model. Please check the target modules and try again.",
            "peft/tuners/tuners_utils.py:inject_adapter",
        ),
        R.CONFIG_ERROR,
    ),
    ("peft", "ValueError: Can't find 'adapter_config.json' at 'out/lora'", R.CONFIG_ERROR),
    # accelerate
    ("accelerate", "ValueError: fp16 mixed precision requires a GPU (not 'mps').", R.CONFIG_ERROR),
    (
        "accelerate",
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
        R.CONFIG_ERROR,
    ),
    (
        "accelerate",
        "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' died with <Signals.SIGKILL: 9>.",
        R.OOM,
    ),
    (
        "accelerate",
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
        R.CONFIG_ERROR,
    ),
    # datasets
    (
        "datasets",
        "datasets.exceptions.DatasetNotFoundError: Dataset 'acme/chats' doesn't exist on the Hub or cannot be accessed.",
        R.BAD_INPUT,
    ),
    (
        "datasets",
        "datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset",
        R.BAD_INPUT,
    ),
    (
        "datasets",
        _tb("FileNotFoundError: Unable to find '/data/train.jsonl'", "datasets/data_files.py:resolve_pattern"),
        R.BAD_INPUT,
    ),
    (
        "datasets",
        "pyarrow.lib.ArrowInvalid: JSON parse error: Missing a comma or '}' after an object member. in row 12",
        R.BAD_INPUT,
    ),
    (
        "datasets",
        "datasets.table.CastError: Couldn't cast\ntext: string\nto\n{'messages': Value(dtype='string')}",
        R.BAD_INPUT,
    ),
    (
        "datasets",
        "ValueError: Config name is missing.\nPlease pick one among the available configs: ['en', 'fr']",
        R.CONFIG_ERROR,
    ),
    (
        "datasets",
        "NotImplementedError: Loading a dataset cached in a LocalFileSystem is not supported.",
        R.DEPENDENCY_ERROR,
    ),
    ("datasets", "ValueError: num_samples should be a positive integer value, but got num_samples=0", R.BAD_INPUT),
    # tokenizers
    (
        "tokenizers",
        "Exception: data did not match any variant of untagged enum ModelWrapper at line 250373 column 3",
        R.DEPENDENCY_ERROR,
    ),
    (
        "tokenizers",
        "TypeError: TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]",
        R.BAD_INPUT,
    ),
    # huggingface_hub
    (
        "huggingface_hub",
        "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1)\nRepository Not Found for url: https://huggingface.co/api/models/acme/x",
        R.CONFIG_ERROR,
    ),
    (
        "huggingface_hub",
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url https://huggingface.co/meta-llama/x/resolve/main/config.json.",
        R.AUTH_ERROR,
    ),
    (
        "huggingface_hub",
        "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: https://huggingface.co/api/models/acme/x",
        R.INFRA_TRANSIENT,
    ),
    (
        "huggingface_hub",
        "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub and we cannot find the requested files in the local cache.",
        R.INFRA_TRANSIENT,
    ),
    (
        "huggingface_hub",
        "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/x: offline mode is enabled.",
        R.CONFIG_ERROR,
    ),
    (
        "huggingface_hub",
        "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/whoami-v2\nInvalid user token.",
        R.AUTH_ERROR,
    ),
    ("huggingface_hub", "Your proposed upload is smaller than the minimum allowed size", R.HUB_ERROR),
    (
        "huggingface_hub",
        "huggingface_hub.errors.HfHubHTTPError: 413 Client Error: Payload Too Large for url: https://huggingface.co/api/models/u/m/preupload/main",
        R.HUB_ERROR,
    ),
    (
        "huggingface_hub",
        "requests.exceptions.HTTPError: 400 Client Error: Bad Request for url: https://huggingface.co/api/models/u/m/commit/main",
        R.HUB_ERROR,
    ),
    (
        "huggingface_hub",
        "LFS: Authorization error: https://s3.us-east-1.amazonaws.com/lfs.huggingface.co/u/m/abc\nCheck that you have proper access to the repository",
        R.HUB_ERROR,
    ),
    (
        "huggingface_hub",
        "RuntimeError: Error while uploading 'model-00001-of-00002.safetensors' to the Hub.",
        R.HUB_ERROR,
    ),
    (
        "huggingface_hub",
        "{'train_runtime': 120.0, 'train_loss': 1.2}\n"
        + _tb(
            "huggingface_hub.errors.HfHubHTTPError: 500 Server Error: Internal Server Error for url: https://huggingface.co/api/models/u/m/commit/main",
            "transformers/trainer.py:push_to_hub",
            "huggingface_hub/hf_api.py:create_commit",
        ),
        R.HUB_ERROR,
    ),
    # bitsandbytes
    (
        "bitsandbytes",
        "RuntimeError: CUDA Setup failed despite GPU being available. Please run the following command to get more information:",
        R.DEPENDENCY_ERROR,
    ),
    (
        "bitsandbytes",
        "The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers and GPU quantization are unavailable.\nAttributeError: 'NoneType' object has no attribute 'cadam32bit_grad_fp32'",
        R.DEPENDENCY_ERROR,
    ),
    (
        "bitsandbytes",
        "ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the quantized model.",
        R.OOM,
    ),
    # deepspeed
    (
        "deepspeed",
        _tb(
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
            "deepspeed/runtime/fp16/loss_scaler.py:update_scale",
        )
        + "\n  4%|▍         | 17/387 [05:25<1:57:56, 19.13s/it]",
        R.DIVERGED,
    ),
    (
        "deepspeed",
        "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 16 != 4 * 1 * 2",
        R.CONFIG_ERROR,
    ),
    (
        "deepspeed",
        "deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA op(s)",
        R.DEPENDENCY_ERROR,
    ),
    ("deepspeed", "RuntimeError: Error building extension 'fused_adam'", R.DEPENDENCY_ERROR),
    # torch, torchrun, NCCL
    (
        "torch",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        R.INFRA_TRANSIENT,
    ),
    (
        "torch",
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following reasons: 1) Use of a module parameter outside the `forward` function.",
        R.CONFIG_ERROR,
    ),
    (
        "torch",
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that your module has parameters that were not used in producing loss.",
        R.CONFIG_ERROR,
    ),
    ("torch", "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn", R.CONFIG_ERROR),
    ("torch", "RuntimeError: CUDA error: an illegal memory access was encountered", R.DEPENDENCY_ERROR),
    ("torch", "RuntimeError: FlashAttention only supports Ampere GPUs or newer.", R.CONFIG_ERROR),
    (
        "torch",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 4294967296 bytes.",
        R.OOM,
    ),
    (
        "torch",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 4242) of binary: /usr/bin/python",
        R.OOM,
    ),
    ("torch", "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.", R.DIVERGED),
    ("torch", "RuntimeError: CUDA error: uncorrectable ECC error encountered", R.INFRA_TRANSIENT),
    ("torch", "RuntimeError: Attempting to unscale FP16 gradients.", R.CONFIG_ERROR),
    # vLLM
    (
        "vllm",
        "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664). Try increasing `gpu_memory_utilization`",
        R.OOM,
    ),
    (
        "vllm",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        R.OOM,
    ),
    ("vllm", "Runtime Error: Cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp: 62", R.OOM),
    (
        "vllm",
        "ValueError: Free memory on device (10.5/79.1 GiB) on startup is less than desired GPU memory utilization (0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        R.OOM,
    ),
    (
        "vllm",
        "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5.",
        R.CONFIG_ERROR,
    ),
    (
        "vllm",
        "ValueError: Model architectures ['FooForCausalLM'] are not supported for now. Supported architectures: dict_keys(['LlamaForCausalLM'])",
        R.DEPENDENCY_ERROR,
    ),
    # llama.cpp
    ("llama.cpp", "NotImplementedError: Architecture 'FooForCausalLM' not supported!", R.CONFIG_ERROR),
    ("llama.cpp", "ValueError: Can not map tensor 'model.layers.0.mlp.gate.weight'", R.CONFIG_ERROR),
    (
        "llama.cpp",
        "llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'qwen9'",
        R.DEPENDENCY_ERROR,
    ),
    ("llama.cpp", "main: failed to quantize model from 'model-f16.gguf'", R.CONFIG_ERROR),
    ("llama.cpp", "AttributeError: type object 'MODEL_ARCH' has no attribute 'QWEN9'", R.DEPENDENCY_ERROR),
    # wandb, trackio
    (
        "wandb",
        "wandb.errors.UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])",
        R.AUTH_ERROR,
    ),
    ("wandb", "wandb: ERROR Error while calling W&B API: permission denied (<Response [403]>)", R.AUTH_ERROR),
    (
        "wandb",
        "wandb.errors.CommError: Run initialization has timed out after 90.0 sec. Please refer to the documentation for additional information",
        R.INFRA_TRANSIENT,
    ),
    ("trackio", "ModuleNotFoundError: No module named 'trackio'", R.DEPENDENCY_ERROR),
    # safetensors
    # A weights file that is not one (a Git LFS pointer, a cut download): the job's input is broken (README's label
    # policy), whatever argument named it.
    ("safetensors", "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge", R.BAD_INPUT),
    (
        "safetensors",
        "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
        R.BAD_INPUT,
    ),
    (
        "safetensors",
        'safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })',
        R.DISK_FULL,
    ),
    # jinja2 chat templates
    ("jinja2", "jinja2.exceptions.TemplateSyntaxError: unexpected '}'", R.CONFIG_ERROR),
    ("jinja2", "jinja2.exceptions.UndefinedError: 'dict object' has no attribute 'content'", R.BAD_INPUT),
    ("jinja2", "jinja2.exceptions.TemplateError: System role not supported", R.CONFIG_ERROR),
    (
        "jinja2",
        "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no template argument was passed!",
        R.CONFIG_ERROR,
    ),
    (
        "jinja2",
        "ImportError: apply_chat_template requires jinja2>=3.1.0 to be installed. Your version is 3.0.3.",
        R.DEPENDENCY_ERROR,
    ),
    # the loss itself, as trainers log it
    ("loss", "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}", R.DIVERGED),
    ("loss", "iter 600 step 600: loss nan, iter time: 65.33ms (optimizer.step)", R.DIVERGED),
    ("loss", "Epoch 1:  10%|█         | 10/100 [00:10<01:30, loss=nan, v_num=0]", R.DIVERGED),
    ("loss", "step 120 | train_loss = inf | lr 2e-5", R.DIVERGED),
    ("loss", "Loss: tensor(nan, device='cuda:0', grad_fn=<NllLossBackward0>)", R.DIVERGED),
    ("loss", "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", R.DIVERGED),
    # SLURM
    ("slurm", "slurmstepd: error: *** JOB 8 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***", R.TIMEOUT),
    ("slurm", "slurmstepd: *** JOB 830329 CANCELLED AT 2018-08-06T17:21:44 DUE TO TIME LIMIT on n447 ***", R.TIMEOUT),
    ("slurm", "slurmstepd: error: *** STEP 8.0 ON n1 CANCELLED AT 2024-01-01T00:00:00 ***", R.CANCELLED),
    (
        "slurm",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=8.batch. Some of the step tasks have been OOM Killed.",
        R.OOM,
    ),
    ("slurm", "slurmstepd: error: *** JOB 8 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO PREEMPTION ***", R.PREEMPTED),
    (
        "slurm",
        "slurmstepd: error: *** JOB 8 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO NODE FAILURE ***",
        R.PREEMPTED,
    ),
    ("slurm", "8|train|gpu|None|2024-01-01T00:00:00|CANCELLED by 1000|0:0", R.CANCELLED),
    ("slurm", "8            train        gpu          8    TIMEOUT      0:0", R.TIMEOUT),
    ("slurm", "8|train|gpu|PREEMPTED|0:0", R.PREEMPTED),
    ("slurm", "srun: error: n1: task 0: Out Of Memory", R.OOM),
    (
        "slurm",
        "submitit WARNING (2024-01-01 00:00:00,000) - Caught signal SIGHUP on n1: this job is preempted.",
        R.PREEMPTED,
    ),
    (
        "slurm",
        "submitit WARNING (2024-01-01 00:00:00,000) - Caught signal SIGUSR2 on n1: this job is timed-out.",
        R.TIMEOUT,
    ),
    (
        "slurm",
        "srun: error: Unable to allocate resources: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
        R.CONFIG_ERROR,
    ),
    (
        "slurm",
        "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
        R.CONFIG_ERROR,
    ),
    ("pbs", "=>> PBS: job killed: walltime 3615 exceeded limit 3600", R.TIMEOUT),
    ("lsf", "TERM_RUNLIMIT: job killed after reaching LSF run time limit.", R.TIMEOUT),
    # Kubernetes
    ("kubernetes", "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137", R.OOM),
    (
        "kubernetes",
        "Status: Failed\nReason: Evicted\nMessage: The node was low on resource: ephemeral-storage.",
        R.DISK_FULL,
    ),
    ("kubernetes", "Pod ephemeral local storage usage exceeds the total limit of containers 10Gi.", R.DISK_FULL),
    ("kubernetes", "Warning  DeadlineExceeded  job/train  Job was active longer than specified deadline", R.TIMEOUT),
    ("kubernetes", "Normal  Preempted  pod/train-0  Preempted by pod 1b2c-3d on node gpu-7", R.PREEMPTED),
    (
        "kubernetes",
        "Message: The node was low on resource: memory. Container trainer was using 60Gi, which exceeds its request of 32Gi.",
        R.OOM,
    ),
    # shells
    ("shell", "bash: line 1:  4242 Killed                  python train.py", R.OOM),
    ("shell", "zsh: killed     python train.py", R.OOM),
    ("shell", "Killed", R.OOM),
    ("shell", "timeout: sending signal TERM to command 'python'", R.TIMEOUT),
    # HF Jobs
    (
        "hf_jobs",
        "Job timed out after 2h",
        R.TIMEOUT,
    ),  # Round 5's sweep, library by library: the fatal errors users report most (issue threads) in each library's own
    # raise statements' words. transformers
    ("transformers", "ValueError: Trainer: evaluation requires an eval_dataset.", R.CONFIG_ERROR),
    ("transformers", "ValueError: Can't find a valid checkpoint at /out/checkpoint-500", R.CONFIG_ERROR),
    (
        "transformers",
        "ValueError: The model did not return a loss from the inputs, only the following keys: logits. For reference, the inputs it received are input_ids,attention_mask.",
        R.BAD_INPUT,
    ),
    (
        "transformers",
        "ValueError: Input length of input_ids is 5000, but `max_length` is set to 20. This can lead to unexpected behavior.",
        R.CONFIG_ERROR,
    ),
    (
        "transformers",
        "ValueError: Unknown quantization type, got fp8 - supported types are: ['awq', 'bitsandbytes_4bit', 'bitsandbytes_8bit', 'gptq']",
        R.DEPENDENCY_ERROR,
    ),
    (
        "transformers",
        "ValueError: Tokenizer class Qwen9Tokenizer does not exist or is not currently imported.",
        R.DEPENDENCY_ERROR,
    ),
    (
        "transformers",
        "ValueError: Flash Attention 2 only supports torch.float16 and torch.bfloat16 dtypes, but the current dype in LlamaForCausalLM is torch.float32.",
        R.CONFIG_ERROR,
    ),
    ("transformers", "RuntimeError: expected scalar type Half but found Float", R.CONFIG_ERROR),
    # trl
    (
        "trl",
        "ValueError: You passed packing=False to the SFTTrainer/SFTConfig, but you didn't pass a `dataset_text_field` or `formatting_func` argument.",
        R.CONFIG_ERROR,
    ),
    (
        "trl",
        "ValueError: The global train batch size (1 x 8) must be evenly divisible by the number of generations per prompt (6).",
        R.CONFIG_ERROR,
    ),
    (
        "trl",
        "ValueError: PEFT is not installed and you passed a `peft_config` in the trainer's kwargs, please install it to use the PEFT models",
        R.DEPENDENCY_ERROR,
    ),
    # peft
    (
        "peft",
        "ValueError: Target module Qwen2VLVisionBlock() is not supported. Currently, only the following modules are supported: `torch.nn.Linear`, `torch.nn.Embedding`, `torch.nn.Conv2d`, `transformers.pytorch_utils.Conv1D`.",
        R.CONFIG_ERROR,
    ),
    ("peft", "ImportError: cannot import name 'prepare_model_for_int8_training' from 'peft'", R.DEPENDENCY_ERROR),
    # accelerate
    (
        "accelerate",
        "ValueError: You can't train a model that has been loaded with `device_map='auto'` in any distributed mode. Please rerun your script specifying `--num_processes=1`",
        R.CONFIG_ERROR,
    ),
    (
        "accelerate",
        "ValueError: You can't use same `Accelerator()` instance with multiple models when using DeepSpeed",
        R.CONFIG_ERROR,
    ),
    ("accelerate", "RuntimeError: CUDA error: invalid device ordinal", R.CONFIG_ERROR),
    (
        "accelerate",
        "ImportError: DeepSpeed is not installed => run `pip install deepspeed` or build it from source.",
        R.DEPENDENCY_ERROR,
    ),
    # datasets
    (
        "datasets",
        "[rank1]: KeyError: 'Column length not in the dataset. Current columns in the dataset: []'",
        R.BAD_INPUT,
    ),
    (
        "datasets",
        "ValueError: Column lengths mismatch: columns ['input_ids', 'labels'] have length [10, 10] while prompt has length 50.",
        R.BAD_INPUT,
    ),
    ("datasets", "ValueError: Unknown split \"validation\". Should be one of ['train'].", R.BAD_INPUT),
    (
        "datasets",
        "ValueError: Couldn't infer the same data file format for all splits. Got {'train': ('json', {}), 'test': ('csv', {})}",
        R.BAD_INPUT,
    ),
    (
        "datasets",
        "datasets.utils.info_utils.NonMatchingSplitsSizesError: [{'expected': SplitInfo(name='train', num_bytes=10), 'recorded': SplitInfo(name='train', num_bytes=5)}]",
        R.BAD_INPUT,
    ),
    (
        "datasets",
        "datasets.exceptions.DatasetGenerationCastError: An error occurred while generating the dataset\n\nAll the data files must have the same columns, but at some point there are 2 new columns ({'split', 'index'})",
        R.BAD_INPUT,
    ),
    # huggingface_hub
    (
        "huggingface_hub",
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/data/models/qwen-7b'. Use `repo_type` argument if needed.",
        R.CONFIG_ERROR,
    ),
    (
        "huggingface_hub",
        "huggingface_hub.errors.EntryNotFoundError: 404 Client Error. Entry Not Found for url: https://huggingface.co/acme/x/resolve/main/adapter_config.json.",
        R.CONFIG_ERROR,
    ),
    (
        "huggingface_hub",
        "huggingface_hub.errors.HfHubHTTPError: 504 Server Error: Gateway Time-out for url: https://huggingface.co/api/models/acme/x",
        R.INFRA_TRANSIENT,
    ),
    (
        "huggingface_hub",
        'huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: You don\'t have the rights to create a model under the namespace "acme".',
        R.AUTH_ERROR,
    ),
    # bitsandbytes
    (
        "bitsandbytes",
        "CUDA SETUP: Something unexpected happened. Please compile from source:\nCUDA SETUP: Setup Failed!",
        R.DEPENDENCY_ERROR,
    ),
    (
        "bitsandbytes",
        "CUDA SETUP: Required library version not found: libbitsandbytes_cuda118.so. Maybe you need to compile it from source?\nCUDA SETUP: Defaulting to libbitsandbytes_cpu.so...\nCUDA SETUP: CUDA detection failed! Possible reasons:",
        R.DEPENDENCY_ERROR,
    ),
    (
        "bitsandbytes",
        "Could not load bitsandbytes native library: /x/bitsandbytes/libbitsandbytes_cpu.so: cannot open shared object file: No such file or directory",
        R.DEPENDENCY_ERROR,
    ),
    (
        "bitsandbytes",
        "RuntimeError: CUDA Setup failed despite CUDA being available. Please run the following command to get more information:",
        R.DEPENDENCY_ERROR,
    ),
    ("bitsandbytes", "Error invalid configuration argument at line 119 in file /src/csrc/ops.cu", R.DEPENDENCY_ERROR),
    # deepspeed and extension builds
    (
        "deepspeed",
        "deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: Installed CUDA version 12.2 does not match the version torch was compiled with 11.7, unable to compile cuda/cpp extensions without a matching cuda version.",
        R.DEPENDENCY_ERROR,
    ),
    ("deepspeed", "nvcc fatal   : Value 'c++17' is not defined for option 'std'", R.DEPENDENCY_ERROR),
    (
        "deepspeed",
        "[2/3] c++ -MMD -MF fused_adam_frontend.o.d -c fused_adam_frontend.cpp\nninja: build stopped: subcommand failed.",
        R.DEPENDENCY_ERROR,
    ),
    (
        "deepspeed",
        "/x/torch/include/torch/csrc/python_headers.h:12:10: fatal error: Python.h: No such file or directory",
        R.DEPENDENCY_ERROR,
    ),
    (
        "deepspeed",
        "AssertionError: no_sync context manager is incompatible with gradient partitioning logic of ZeRO stage 3",
        R.CONFIG_ERROR,
    ),
    ("build", "error: command '/usr/local/cuda/bin/nvcc' failed with exit code 1", R.DEPENDENCY_ERROR),
    ("build", "#error -- unsupported GNU version! gcc versions later than 12 are not supported!", R.DEPENDENCY_ERROR),
    (
        "pip",
        "ERROR: Cannot install trl==0.9.6 and transformers==4.30.0 because these package versions have conflicting dependencies.\nERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/",
        R.DEPENDENCY_ERROR,
    ),
    # torch and NCCL
    (
        "torch",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5\nncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA device 10",
        R.CONFIG_ERROR,
    ),
    ("torch", "AssertionError: Torch not compiled with CUDA enabled", R.DEPENDENCY_ERROR),
    (
        "torch",
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
        R.DEPENDENCY_ERROR,
    ),
    (
        "torch",
        "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",
        R.DEPENDENCY_ERROR,
    ),
    (
        "torch",
        "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: c10::BFloat16 != c10::Half",
        R.CONFIG_ERROR,
    ),
    ("torch", "RuntimeError: Input type (float) and bias type (c10::Half) should be the same", R.CONFIG_ERROR),
    ("torch", "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'", R.CONFIG_ERROR),
    (
        "torch",
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method",
        R.CONFIG_ERROR,
    ),
    ("torch", _tb("KeyboardInterrupt", "torch/utils/data/dataloader.py:__next__"), R.CANCELLED),
    (
        "xformers",
        "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:",
        R.DEPENDENCY_ERROR,
    ),
    # vllm
    (
        "vllm",
        "ValueError: User-specified max_model_len (131072) is greater than the derived max_model_len (max_position_embeddings=8192 or model_max_length=None in model's config.json).",
        R.CONFIG_ERROR,
    ),
    (
        "vllm",
        "ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (3).",
        R.CONFIG_ERROR,
    ),
    # llama.cpp
    (
        "llama.cpp",
        "error loading model: unknown (magic, version) combination: 67676a74, 00000003; is this really a GGML file?",
        R.CONFIG_ERROR,
    ),
    ("llama.cpp", "gguf_init_from_file: invalid magic characters 'lmgg', expected 'GGUF'", R.CONFIG_ERROR),
    (
        "llama.cpp",
        "FileNotFoundError: [Errno 2] No such file or directory: 'llama-3-8B-Instruct/config.json'",
        R.CONFIG_ERROR,
    ),
    (
        "llama.cpp",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out of memory",
        R.OOM,
    ),
    # unsloth
    (
        "unsloth",
        "NotImplementedError: Unsloth: No NVIDIA GPU found? Unsloth currently only supports GPUs!",
        R.DEPENDENCY_ERROR,
    ),
    (
        "unsloth",
        "NotImplementedError: Unsloth: meta-llama/Llama-3.1-8B is not supported in your current Unsloth version! Please update Unsloth",
        R.DEPENDENCY_ERROR,
    ),
    ("unsloth", "ImportError: Unsloth: Please install unsloth_zoo via `pip install unsloth_zoo`", R.DEPENDENCY_ERROR),
    (
        "unsloth",
        "ValueError: Unsloth: Untrained tokens of [[128011, 128012]] found, but embed_tokens & lm_head not trainable, causing NaNs.",
        R.CONFIG_ERROR,
    ),
    # axolotl
    (
        "axolotl",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for AxolotlConfigWCapabilities\npretraining_dataset\n  Input should be a valid list [type=list_type, input_value={'path': 'c4'}, input_type=dict]",
        R.CONFIG_ERROR,
    ),
    (
        "axolotl",
        "ValueError: Please set lora_modules_to_save to [`embed_tokens`, `lm_head`] when using an adapter and changing the special tokens.",
        R.CONFIG_ERROR,
    ),
    ("axolotl", "ValueError: unhandled prompt tokenization strategy: alpaca_x", R.CONFIG_ERROR),
    # LLaMA-Factory
    (
        "llamafactory",
        "RuntimeError: Cannot find valid samples, check `data/README.md` for the data format.",
        R.BAD_INPUT,
    ),
    ("llamafactory", "ValueError: Undefined dataset my_data in dataset_info.json.", R.CONFIG_ERROR),
    (
        "llamafactory",
        "ValueError: Cannot open data/dataset_info.json due to [Errno 2] No such file or directory.",
        R.CONFIG_ERROR,
    ),
    ("llamafactory", "ValueError: Template qwen9 does not exist.", R.CONFIG_ERROR),
    (
        "llamafactory",
        "ValueError: Please launch distributed training with `llamafactory-cli` or `torchrun`.",
        R.CONFIG_ERROR,
    ),
    # notebooks and clouds
    ("colab", "Your session crashed after using all available RAM", R.OOM),
    ("gcp", "start-worker 2024/12/17 16:03:58 GCP Metadata Service says termination is imminent", R.PREEMPTED),
    (
        "gcp",
        "INFO:tensorflow:ShutdownHook: lame workers found: HeartbeatManager(/job:worker/replica:0/task:0/device:CPU:0)",
        R.PREEMPTED,
    ),
    ("gcp", "ERROR: the TPU node v3-8 has been preempted", R.PREEMPTED),
    ("aws", "Spot Instance interruption notice: the instance will be stopped at 2024-01-01T00:02:00Z", R.PREEMPTED),
    ("azure", "Scheduled event: EventType: Preempt, ResourceType: VirtualMachine", R.PREEMPTED),
    ("cloud", "The spot VM was stopped by the provider", R.PREEMPTED),
    ("julia", "Train Epoch 6:  81%|█████     | ETA: 0:00:00\nERROR: InterruptException:", R.CANCELLED),
    # round 6 of the real-log corpus: families it showed first
    (
        "datasets",
        "An error occurred while generating the dataset All the data files must have the same columns, but at some point there are 1 missing columns ({'label'})",
        R.BAD_INPUT,
    ),
    ("pillow", "OSError: image file is truncated (54 bytes not processed)", R.BAD_INPUT),
    ("pillow", "PIL.UnidentifiedImageError: cannot identify image file 'data/images/2335991.jpg'", R.BAD_INPUT),
    ("datasets", "RuntimeError: Dataset scripts are no longer supported, but found logiqa.py", R.CONFIG_ERROR),
    ("huggingface_hub", '{"error":"You don\'t have the rights to create a model under this namespace"}', R.AUTH_ERROR),
    (
        "transformers",
        "org/llama-7b-hf is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'",
        R.CONFIG_ERROR,
    ),
    (
        "megatron",
        "RuntimeError: Rank 15, node n1, device 15, iteration -1: Unexpected result nan (message='found NaN in local grad norm for bucket #0 in backward pass')",
        R.DIVERGED,
    ),
    (
        "unsloth",
        "RuntimeError: Unsloth: The file 'llama.cpp/llama-quantize' or 'llama.cpp/quantize' does not exist.",
        R.DEPENDENCY_ERROR,
    ),
    ("torch", "RuntimeError: write(): fd 29 failed with Input/output error", R.DISK_FULL),
    # The generic vocabulary (outcomes/generic.py): a runtime or library no row above names, in the common words of its
    # failure. These wordings are other runtimes' and libraries' than the real logs the classes were read off.
    # Memory exhausted, in any runtime's words.
    ("generic-memory", "[metal] Command buffer failed (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", R.OOM),
    (
        "generic-memory",
        "ggml_vulkan: Device memory allocation of size 4294967296 failed.\nggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        R.OOM,
    ),
    (
        "generic-memory",
        "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc",
        R.OOM,
    ),
    (
        "generic-memory",
        'OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading "C:\\envs\\ft\\lib\\site-packages\\torch\\lib\\cudnn_adv_infer64_8.dll" or one of its dependencies.',
        R.OOM,
    ),
    (
        "generic-memory",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[32,4096,4096] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        R.OOM,
    ),
    ("generic-memory", "Task was killed due to the node running low on memory.", R.OOM),
    ("generic-memory", "Warning: the worker process was killed by the OOM killer; restarting the pool", R.OOM),
    (
        "generic-memory",
        "Container [pid=4242,containerID=container_1700_0001_01_000002] is running beyond physical memory limits. Current usage: 16.2 GB of 16 GB physical memory used. Killing container.",
        R.OOM,
    ),
    ("generic-memory", "Your notebook tried to allocate more memory than is available. It has restarted.", R.OOM),
    ("generic-memory", "llama_model_load: error: insufficient GPU memory to offload 33 layers", R.OOM),
    # A library refusing a setting, a missing credential, a package to install: read on an exception's own line.
    (
        "generic-refusal",
        _tb(
            "ValueError: DeepSpeed ZeRO-3 is enabled and is not compatible with `create_reference_model()`. Please instantiate your reference model directly with `AutoModelForCausalLM.from_pretrained()`.",
            "trl/models/modeling_base.py:create_reference_model",
        ),
        R.CONFIG_ERROR,
    ),
    (
        "generic-refusal",
        "ValueError: Gradient checkpointing is not compatible with `--freeze_embeddings` or `--freeze_n_layers`.",
        R.CONFIG_ERROR,
    ),
    ("generic-refusal", "NotImplementedError: Packing is not supported yet for vision-language models", R.CONFIG_ERROR),
    (
        "generic-refusal",
        "ValueError: `per_device_train_batch_size` must be specified when `auto_find_batch_size` is off",
        R.CONFIG_ERROR,
    ),
    ("generic-refusal", "RuntimeError: Please specify `--dataset` or `--train_file`", R.CONFIG_ERROR),
    (
        "generic-refusal",
        "ValueError: `save_safetensors=False` and `push_to_hub_format='safetensors'` are mutually exclusive",
        R.CONFIG_ERROR,
    ),
    (
        "generic-refusal",
        "ValueError: Invalid value for `lr_scheduler_type`: 'cosine_warm'. Expected one of ['linear', 'cosine', 'constant']",
        R.CONFIG_ERROR,
    ),
    ("generic-refusal", "ValueError: Please set the OPENAI_API_KEY environment variable", R.AUTH_ERROR),
    ("generic-refusal", "ValueError: HF token is required to push the adapter to the Hub", R.AUTH_ERROR),
    ("generic-refusal", "RuntimeError: You are not logged in to the Hugging Face Hub", R.AUTH_ERROR),
    (
        "generic-refusal",
        "ValueError: This feature requires the `liger_kernel` package. Please install it with pip install liger-kernel",
        R.DEPENDENCY_ERROR,
    ),
    (
        "generic-refusal",
        "RuntimeError: flash_attn is not installed, but attn_implementation asks for it",
        R.DEPENDENCY_ERROR,
    ),
    # A metric logged NaN at the newest step, in any logger's format.
    ("generic-nan", "step 1200 | loss 2.31 | grad_norm nan | lr 1.0e-04", R.DIVERGED),
    ("generic-nan", "[2024-06-01 12:00:00] train/loss=0.0000 train/grad_norm=NaN lr=2e-05", R.DIVERGED),
    ("generic-nan", "tensor(nan, device='cuda:0', grad_fn=<MseLossBackward0>)", R.DIVERGED),
    # Bytes that do not decode as the data's format.
    (
        "generic-data",
        "UnicodeDecodeError: 'gbk' codec can't decode byte 0xad in position 12: illegal multibyte sequence",
        R.BAD_INPUT,
    ),
    (
        "generic-data",
        "pandas.errors.ParserError: Error tokenizing data. C error: Expected 3 fields in line 1201, saw 5",
        R.BAD_INPUT,
    ),
    ("generic-data", "_csv.Error: field larger than field limit (131072)", R.BAD_INPUT),
    # A command line that names what is not there; a YAML config that does not parse.
    (
        "generic-command",
        "python3: can't open file '/workspace/train_lora.py': [Errno 2] No such file or directory",
        R.CONFIG_ERROR,
    ),
    ("generic-command", "scripts/run.sh: line 12: --per_device_train_batch_size: command not found", R.CONFIG_ERROR),
    (
        "generic-command",
        'yaml.scanner.ScannerError: mapping values are not allowed here\n  in "config.yaml", line 4, column 12',
        R.CONFIG_ERROR,
    ),
    # NCCL's failed CUDA call names no reason: not the network.
    (
        "nccl",
        "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1207, unhandled cuda error, NCCL version 2.14.3",
        R.UNKNOWN,
    ),
    # The classes read off round 8's misses (outcomes/generic.py, exits.py), each in other platforms', parsers' and
    # readers' wordings than those logs'.
    # A platform's time limit: serverless functions, CI runners, a cloud's maximum runtime, a parent's limit.
    ("platform-time-limit", "Task's current input in-01HZX4Q7 hit its timeout of 600s", R.TIMEOUT),
    (
        "platform-time-limit",
        "##[error]The job running on runner GitHub Actions 12 has exceeded the maximum execution time of 360 minutes.",
        R.TIMEOUT,
    ),
    ("platform-time-limit", "ERROR: Job failed: execution took longer than 3h0m0s seconds", R.TIMEOUT),
    (
        "platform-time-limit",
        "2024-06-01 10:00:00 Stopping - Stopping the training job\nTraining job status: Stopped, secondary status: MaxRuntimeExceeded",
        R.TIMEOUT,
    ),
    ("platform-time-limit", "RayJob llama-sft failed: the job has passed the activeDeadlineSeconds (7200)", R.TIMEOUT),
    (
        "platform-time-limit",
        "subprocess.TimeoutExpired: Command '['python', 'finetune.py', '--config', 'lora.yaml']' timed out after 14400 seconds",
        R.TIMEOUT,
    ),
    ("platform-time-limit", "step 812/3000 loss=1.21\nTime limit exceeded", R.TIMEOUT),
    # The machine shut down or the runtime dropped under the job: a cloud pressing the VM's power button, a node's
    # graceful shutdown, AWS's spot notice, a notebook's runtime.
    ("vm-shutdown", "Mar 02 04:11:09 gpu-vm systemd-logind[812]: Power key pressed short.", R.PREEMPTED),
    ("vm-shutdown", "Mar 02 04:11:09 gpu-vm systemd-logind[812]: System is powering down.", R.PREEMPTED),
    (
        "vm-shutdown",
        "Broadcast message from root@train-node-3 (Sat 2024-03-02 04:11:09 UTC):\n\nThe system will power off now!",
        R.PREEMPTED,
    ),
    (
        "vm-shutdown",
        "Status: Failed\nReason: Terminated\nMessage: Pod was terminated in response to imminent node shutdown.",
        R.PREEMPTED,
    ),
    (
        "vm-shutdown",
        'GET http://169.254.169.254/latest/meta-data/spot/instance-action -> {"action": "terminate", "time": "2024-03-02T04:13:00Z"}',
        R.PREEMPTED,
    ),
    ("notebook-runtime", "Error: Not connected to a runtime.", R.PREEMPTED),
    ("notebook-runtime", "Runtime disconnected", R.PREEMPTED),
    # The GPU lost from the bus, as the driver, NVML and the kernel's Xid codes report it.
    (
        "gpu-lost",
        "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU",
        R.INFRA_TRANSIENT,
    ),
    ("gpu-lost", "Failed to initialize NVML: Unknown Error", R.INFRA_TRANSIENT),
    (
        "gpu-lost",
        "[12031.55] NVRM: Xid (PCI:0000:41:00): 119, pid=8812, name=python, Timeout after 6s of waiting for RPC response from GPU1 GSP!",
        R.INFRA_TRANSIENT,
    ),
    (
        "gpu-lost",
        "kernel: NVRM: Xid (PCI:0000:c1:00): 48, pid=2211, name=python3, An uncorrectable double bit error",
        R.INFRA_TRANSIENT,
    ),
    # Someone's Ctrl-C, said by a launcher, a framework or the terminal's echo (a traceback cut before its interrupt).
    (
        "user-interrupt",
        "Epoch 3:  41%|████      | 812/1980 [12:01<17:17, 1.13it/s, loss=1.04]\nDetected KeyboardInterrupt, attempting graceful shutdown ...",
        R.CANCELLED,
    ),
    (
        "user-interrupt",
        "W0302 04:11:09.000 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGINT death signal, shutting down workers",
        R.CANCELLED,
    ),
    (
        "user-interrupt",
        f'^CTraceback (most recent call last):\n  File "{SITE}/accelerate/commands/launch.py", line 1, in simple_launcher\n    process.wait()',
        R.CANCELLED,
    ),
    # A command-line parser refusing a command line: click and typer, Fire, absl, Hydra, jsonargparse.
    (
        "cli-usage",
        "Usage: axolotl train [OPTIONS] CONFIG\nTry 'axolotl train --help' for help.\n\nError: No such option: --deepspeed_config",
        R.CONFIG_ERROR,
    ),
    ("cli-usage", "Usage: ms-sft [OPTIONS] DATASET\n\nError: Missing argument 'DATASET'.", R.CONFIG_ERROR),
    (
        "cli-usage",
        "╭─ Error ──────────────────────────╮\n│ No such command 'finetune'.      │\n╰──────────────────────────────────╯",
        R.CONFIG_ERROR,
    ),
    ("cli-usage", "ERROR: Could not consume arg: --lora_rank\nUsage: finetune.py <flags>", R.CONFIG_ERROR),
    ("cli-usage", "FATAL Flags parsing error: Unknown command line flag 'learning_rat'", R.CONFIG_ERROR),
    (
        "cli-usage",
        "Could not override 'trainer.max_step'.\nTo append to your config use +trainer.max_step=100\nKey 'max_step' is not in struct",
        R.CONFIG_ERROR,
    ),
    (
        "cli-usage",
        "usage: litgpt [-h] {download,finetune,pretrain} ...\nerror: Unrecognized arguments: --precision bf16-true",
        R.CONFIG_ERROR,
    ),
    # Weights that do not fit the model they are loaded into.
    (
        "weights-misfit",
        'RuntimeError: Missing key(s) in state_dict: "model.norm.weight", "lm_head.weight".',
        R.CONFIG_ERROR,
    ),
    (
        "weights-misfit",
        "Expected shape (4096, 4096) but received shape (2048, 4096) for parameter model.layers.0.self_attn.q_proj.weight",
        R.CONFIG_ERROR,
    ),
    (
        "weights-misfit",
        'ValueError: Trying to set a tensor of shape torch.Size([32000, 4096]) in "weight" (which has shape torch.Size([32001, 4096])), this looks incorrect.',
        R.CONFIG_ERROR,
    ),
    # A model or tokenizer file that is not one: each reader's words for a Git LFS pointer, an error page, a cut file.
    ("corrupt-file", "_pickle.UnpicklingError: invalid load key, 'v'.", R.BAD_INPUT),
    (
        "corrupt-file",
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
        R.BAD_INPUT,
    ),
    (
        "corrupt-file",
        "RuntimeError: Internal: src/sentencepiece_processor.cc(1101) [model_proto->ParseFromArray(serialized.data(), serialized.size())]",
        R.BAD_INPUT,
    ),
    ("corrupt-file", "OSError: Unable to synchronously open file (file signature not found)", R.BAD_INPUT),
    ("corrupt-file", "gguf_init_from_file_impl: invalid magic characters: 'vers', expected 'GGUF'", R.BAD_INPUT),
    (
        "corrupt-file",
        "OSError: Unable to load weights from pytorch checkpoint file for './llama-7b' at './llama-7b/pytorch_model.bin'. If you tried to load a PyTorch model from a TF 2.0 checkpoint, please set from_tf=True.",
        R.BAD_INPUT,
    ),
    # Sampling from data of no length: the data reached the trainer empty.
    ("empty-data", "ValueError: empty range for randrange() (0, 0, 0)", R.BAD_INPUT),
    ("empty-data", "IndexError: Cannot choose from an empty sequence", R.BAD_INPUT),
    ("empty-data", "ValueError: a cannot be empty unless no samples are taken", R.BAD_INPUT),
    (
        "empty-data",
        "RuntimeError: random_ expects 'from' to be less than 'to', but got from=0 >= to=-1536",
        R.BAD_INPUT,
    ),
    # A GPU the installed torch (or TensorFlow) has no kernels for.
    (
        "gpu-arch",
        "UserWarning: NVIDIA B200 with CUDA capability sm_100 is not compatible with the current PyTorch installation.",
        R.DEPENDENCY_ERROR,
    ),
    (
        "gpu-arch",
        "UserWarning:\n    Found GPU0 Tesla K80 which is of cuda capability 3.7.\n    PyTorch no longer supports this GPU because it is too old.",
        R.DEPENDENCY_ERROR,
    ),
    # The Hub refusing what a commit holds (its checks on content, metadata, quota), whenever the push ran.
    (
        "hub-push-refused",
        _tb(
            "huggingface_hub.errors.BadRequestError: (Request ID: Root=1-66aa)\n\nBad request for commit endpoint:\nYour push was rejected because it contains binary files.",
            "huggingface_hub/hf_api.py:create_commit",
            "huggingface_hub/utils/_http.py:hf_raise_for_status",
        ),
        R.HUB_ERROR,
    ),
    (
        "hub-push-refused",
        'ValueError: Invalid metadata in README.md.\n- "license" must be one of [apache-2.0, mit, openrail, other]',
        R.HUB_ERROR,
    ),
    # A server's failure once training finished and the upload began: the push failed (any status, any registry).
    (
        "push-after-training",
        "Training completed. Do not forget to share your model on huggingface.co/models =)\nUploading the adapter to acme/llama-ft\nrequests.exceptions.HTTPError: 502 Server Error: Bad Gateway for url: https://huggingface.co/api/models/acme/llama-ft/preupload/main",
        R.HUB_ERROR,
    ),
    (
        "push-after-training",
        "`Trainer.fit` stopped: `max_epochs=10` reached.\nUploading checkpoint to the model registry...\nHTTP Error 500: Internal Server Error",
        R.HUB_ERROR,
    ),
    # The classes read off round 9's misses (outcomes/generic.py, causes.py, exits.py, tracebacks.py), each in other
    # systems', frameworks' and platforms' wordings than those logs'.
    # A config that does not match the code: OmegaConf, Hydra, yacs/detectron2, jsonargparse, gin, draccus, and any
    # exception a config system raises (by its package, or the frame that raised it).
    (
        "config-system",
        "omegaconf.errors.MissingMandatoryValue: Missing mandatory value: model.pretrained_path\n    full_key: model.pretrained_path\n    object_type=dict",
        R.CONFIG_ERROR,
    ),
    (
        "config-system",
        "{'loss': 1.91, 'learning_rate': 2e-05, 'epoch': 0.1}\nConfigKeyError: Key 'lora_alpha' not in 'PeftSettings'\n    full_key: lora_alpha\n    object_type=PeftSettings",
        R.CONFIG_ERROR,
    ),
    (
        "config-system",
        "{'loss': 2.3, 'epoch': 0.5}\n"
        f'Traceback (most recent call last):\n  File "/job/train.py", line 40, in main\n    rank = cfg.lora.rank\n  File "{SITE}/omegaconf/dictconfig.py", line 359, in __getattr__\n    self._format_and_raise(key=key, value=None, cause=e)\nAttributeError: rank',
        R.CONFIG_ERROR,
    ),
    (
        "config-system",
        "Primary config directory not found.\nhydra.errors.MissingConfigException: Cannot find primary config 'sft_llama3'. Check that it's in your config search path.",
        R.CONFIG_ERROR,
    ),
    (
        "config-system",
        "In 'train': Could not find 'model/llama3_8b'\n\nAvailable options in 'model':\n\tllama2_7b\n\tmistral_7b\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
        R.CONFIG_ERROR,
    ),
    ("config-system", "KeyError: 'Non-existent config key: MODEL.ROI_HEADS.NUM_CLASS'", R.CONFIG_ERROR),
    (
        "config-system",
        'main.py: error: Configuration check failed :: Key "data.batch_size" is required but not included in config object or its value is None.',
        R.CONFIG_ERROR,
    ),
    (
        "config-system",
        "{'loss': 2.1, 'epoch': 0.2}\nValueError: No configurable matching 'train.learning_rat'.\n  In file \"configs/base.gin\", line 3",
        R.CONFIG_ERROR,
    ),
    (
        "config-system",
        "draccus.utils.DecodingError: `policy`: The fields `use_amp` are not valid for ACTConfig",
        R.CONFIG_ERROR,
    ),
    # Hydra's instantiate passing on the failure of the class it built: that failure decides, not the config.
    (
        "config-system",
        "Error in call to target 'transformers.AutoModelForCausalLM.from_pretrained':\nOutOfMemoryError('CUDA out of memory. Tried to allocate 1.00 GiB')\nfull_key: model",
        R.OOM,
    ),
    # A traceback drawn by rich in a box (its frames read as Python's), and a message wrapped at a console's width.
    (
        "boxed-traceback",
        "╭──────────────── Traceback (most recent call last) ────────────────╮\n│ /job/train.py:12 in <module>                                      │\n│ /usr/lib/python3.11/site-packages/transformers/models/auto/config │\n│ uration_auto.py:710 in __getitem__                                │\n╰───────────────────────────────────────────────────────────────────╯\nKeyError: 'qwen9'",
        R.DEPENDENCY_ERROR,
    ),
    (
        "wrapped-message",
        "RuntimeError: Expected to have finished reduction in the prior\niteration before starting a new one. This error indicates that your\nmodule has parameters that were not used in producing loss.",
        R.CONFIG_ERROR,
    ),
    (
        "wrapped-message",
        "{'loss': 1.2, 'grad_norm': 0.8, 'epoch': 0.3}\nValueError: Unable to create tensor, you should probably activate truncation and/or pad\nding with 'padding=True' 'truncation=True' to have batched tensors with the same length.",
        R.CONFIG_ERROR,
    ),
    # fp16's loss scale collapsed to nothing: apex, fairseq, DeepSpeed's older optimizer wording, a logged scale of 0.
    ("loss-scale-collapse", "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.0", R.DIVERGED),
    (
        "loss-scale-collapse",
        "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. Try lowering the learning rate, using gradient clipping or increasing the batch size.",
        R.DIVERGED,
    ),
    (
        "loss-scale-collapse",
        "[deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale: 1e-45, reducing to 0.0",
        R.DIVERGED,
    ),
    (
        "loss-scale-collapse",
        " iteration      900/   10000 | lm loss: 9.8E+00 | loss scale: 0.0 | grad norm: 3.1 |",
        R.DIVERGED,
    ),
    # A loss (or gradients) gone NaN/inf in a framework's own words: mmcv/mmengine, Lightning, Keras, fairseq, torch.
    ("nonfinite-loss", "AssertionError: loss become infinite or NaN!", R.DIVERGED),
    (
        "nonfinite-loss",
        "Epoch 0:  12%|█▏        | 120/1000 [00:30<03:40, 4.00it/s]\nValueError: The loss returned in `training_step` is tensor(nan, device='cuda:0').",
        R.DIVERGED,
    ),
    (
        "nonfinite-loss",
        "Monitored metric val_loss = nan is not finite. Previous best value was 1.234. Signaling Trainer to stop.",
        R.DIVERGED,
    ),
    (
        "nonfinite-loss",
        "1532/3000 [=======>......] - ETA: 40s\nBatch 1532: Invalid loss, terminating training",
        R.DIVERGED,
    ),
    ("nonfinite-loss", "FloatingPointError: gradients are Nan/Inf", R.DIVERGED),
    (
        "nonfinite-loss",
        "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped.",
        R.DIVERGED,
    ),
    ("nonfinite-loss", "iter 400 | loss_mask: nan | loss_dice: nan | lr: 1.0e-04", R.DIVERGED),
    # A collective broken by a lost peer or the network, with no other failure in the log: JAX's coordination service,
    # PyTorch/XLA's rendezvous, gloo, InfiniBand.
    (
        "peer-lost",
        "F0926 17:26:32.075587  157988 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details.",
        R.INFRA_TRANSIENT,
    ),
    (
        "peer-lost",
        "E external/xla/xla/tsl/distributed_runtime/coordination/coordination_service.cc:1170] /job:jax_worker/replica:0/task:7 has been set to ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:7 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
        R.INFRA_TRANSIENT,
    ),
    (
        "peer-lost",
        "RuntimeError: tensorflow/compiler/xla/xla_client/mesh_service.cc:364 : Failed to meet rendezvous 'torch_xla.core.xla_model.save': Socket closed (14)",
        R.INFRA_TRANSIENT,
    ),
    (
        "peer-lost",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.3]:48291",
        R.INFRA_TRANSIENT,
    ),
    # A managed job's cluster, a node or a spot VM taken back, as SkyPilot, Ray, Azure and AWS's handler say it.
    (
        "cluster-preempted",
        "I 11-03 10:12:44 recovery_strategy.py:88] Cluster sky-3f2a-llama-sft is preempted. Relaunching the managed job.",
        R.PREEMPTED,
    ),
    ("cluster-preempted", "(raylet) Task 8a1f failed due to node preemption on node 4c2e9f, retrying.", R.PREEMPTED),
    ("cluster-preempted", "Node 4c2e9f (10.0.3.12) died, death reason: AUTOSCALER_DRAIN_PREEMPTED", R.PREEMPTED),
    ("cluster-preempted", "Low-priority node tvmps_81c3 has been preempted by Azure Batch", R.PREEMPTED),
    ("cluster-preempted", "Spot VM aks-spot-12345-vmss000002 was evicted by the platform", R.PREEMPTED),
    (
        "cluster-preempted",
        'level=info msg="Spot ITN received. Instance will be interrupted at 2024-03-02T04:13:00Z"',
        R.PREEMPTED,
    ),
    # An index or key lookup failing in the function that reads data rows: the data does not have the shape the code
    # reads; not in a function that loads a model or reads the command line.
    (
        "malformed-rows",
        'Traceback (most recent call last):\n  File "/job/train.py", line 80, in <module>\n  File "/job/data.py", line 21, in read_jsonl_rows\n    prompt = fields[2]\nIndexError: list index out of range',
        R.BAD_INPUT,
    ),
    (
        "malformed-rows",
        "/content/finetune.py in preprocess_function(batch)\n     12     for text in batch['text']:\n---> 13         labels.append(text[0])\n\nIndexError: string index out of range",
        R.BAD_INPUT,
    ),
    (
        "malformed-rows",
        'Traceback (most recent call last):\n  File "/job/train.py", line 9, in <module>\n  File "/job/train.py", line 4, in parse_args\n    model = sys.argv[1]\nIndexError: list index out of range',
        R.UNKNOWN,
    ),
    # Trainer computing no loss: from inputs without labels, the data; from inputs with them, the model's class.
    (
        "no-loss",
        "ValueError: The model did not return a loss from the inputs, only the following keys: logits,past_key_values. For reference, the inputs it received are input_ids,attention_mask,token_type_ids.",
        R.BAD_INPUT,
    ),
    (
        "no-loss",
        "ValueError: The model did not return a loss from the inputs, only the following keys: last_hidden_state. For reference, the inputs it received are input_ids,attention_mask,labels.",
        R.CONFIG_ERROR,
    ),
    # Round 10's classes, in other readers', tools' and services' words than its logs'.
    # A data item's media file that its reader cannot decode (audio, image, video readers).
    ("media", "soundfile.LibsndfileError: Error opening '/data/clips/0041.flac': Format not recognised.", R.BAD_INPUT),
    ("media", "audioread.exceptions.NoBackendError", R.BAD_INPUT),
    (
        "media",
        'RuntimeError: Failed to open the input "/data/audio/utt_17.mp3" (Invalid data found when processing input).',
        R.BAD_INPUT,
    ),
    ("media", "PIL.UnidentifiedImageError: cannot identify image file <_io.BytesIO object at 0x7f2a>", R.BAD_INPUT),
    (
        "media",
        "cv2.error: OpenCV(4.8.0) /io/opencv/modules/imgproc/src/color.cpp:182: error: (-215:Assertion failed) !_src.empty() in function 'cvtColor'",
        R.BAD_INPUT,
    ),
    (
        "media",
        "decord._ffi.base.DECORDError: [10:21:03] src/video/video_reader.cc:151: cannot find video stream with wanted index: -1",
        R.BAD_INPUT,
    ),
    # A data row's file that is not there (the row names it), as opposed to a script or model path.
    (
        "data-item-missing",
        _tb(
            "FileNotFoundError: [Errno 2] No such file or directory: '/data/coco/train2017/000000391895.png'",
            "torch/utils/data/_utils/fetch.py:fetch",
        ),
        R.BAD_INPUT,
    ),
    # A native extension failing to compile or link (DeepSpeed ops, flash-attn, apex, a custom kernel).
    (
        "native-build",
        "/usr/bin/ld: cannot find -lcudart: No such file or directory\ncollect2: error: ld returned 1 exit status",
        R.DEPENDENCY_ERROR,
    ),
    ("native-build", "ninja: build stopped: subcommand failed.", R.DEPENDENCY_ERROR),
    ("native-build", "nvcc fatal   : Unsupported gpu architecture 'compute_90'", R.DEPENDENCY_ERROR),
    (
        "native-build",
        "csrc/flash_attn/flash_api.cpp:5:10: fatal error: cuda_runtime_api.h: No such file or directory",
        R.DEPENDENCY_ERROR,
    ),
    ("native-build", "error: command '/usr/local/cuda/bin/nvcc' failed with exit code 1", R.DEPENDENCY_ERROR),
    (
        "native-build",
        "/usr/local/cuda/include/crt/host_config.h:132:2: error: #error -- unsupported GNU version! gcc versions later than 11 are not supported!",
        R.DEPENDENCY_ERROR,
    ),
    # A rate limit (HTTP 429), whatever the tool makes of it afterwards.
    (
        "rate-limit",
        "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: https://huggingface.co/api/models/org/m",
        R.INFRA_TRANSIENT,
    ),
    (
        "rate-limit",
        "openai.RateLimitError: Error code: 429 - {'error': {'message': 'Rate limit reached for requests'}}",
        R.INFRA_TRANSIENT,
    ),
    ("rate-limit", "WARNING: request to https://api.wandb.ai/graphql failed with status code 429", R.INFRA_TRANSIENT),
    ("rate-limit", "{'loss': 0.41, 'epoch': 2.0}\nstep 429 of 1000", R.UNKNOWN),
    # NCCL's socket transport losing its peer, then a hang.
    (
        "nccl-socket",
        "node3:1201:1290 [1] NCCL WARN NET/Socket : Call to send to 10.0.0.5<5512> failed : Broken pipe",
        R.INFRA_TRANSIENT,
    ),
    (
        "nccl-socket",
        "node3:1201:1290 [1] NCCL WARN Net : Connect to 10.0.0.5<5512> failed : Connection refused",
        R.INFRA_TRANSIENT,
    ),
    # A kernel that died after a huge allocation warning: host RAM; either alone decides nothing.
    (
        "host-ram",
        "2023-03-01 10:02:11.5 W tensorflow/core/framework/cpu_allocator_impl.cc:82] Allocation of 9437184000 exceeds 10% of free system memory.\n[I 10:02:40.1 NotebookApp] KernelRestarter: restarting kernel (1/5), keep random ports",
        R.OOM,
    ),
    ("host-ram", "tcmalloc: large alloc 2147483648 bytes == 0x5581 @  0x7f1\nKernel died, restarting", R.OOM),
    (
        "host-ram",
        "tcmalloc: large alloc 2147483648 bytes == 0x5581 @  0x7f1\n{'train_runtime': 120.0, 'train_loss': 0.5}",
        R.UNKNOWN,
    ),
    # XLA on TPU out of HBM.
    (
        "tpu-memory",
        "RuntimeError: Resource exhausted: Ran out of memory in memory space hbm. Used 17.5G of 15.48G hbm.",
        R.OOM,
    ),
    # A tokenizer given a data value that is not text.
    (
        "not-text",
        "TypeError: TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]",
        R.BAD_INPUT,
    ),
    ("not-text", "TypeError: argument 'text': 'float' object cannot be converted to 'PyString'", R.BAD_INPUT),
    (
        "not-text",
        "ValueError: Input nan is not valid. Should be a string, a list/tuple of strings or a list/tuple of integers.",
        R.BAD_INPUT,
    ),
    # A Hub address for a repo id left unset: the argument, not the token.
    (
        "unset-repo",
        "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-65) Repository Not Found for url: https://huggingface.co/api/models/None/revision/main.",
        R.CONFIG_ERROR,
    ),
    (
        "unset-repo",
        "OSError: 404 Client Error: Not Found for url: https://huggingface.co/null/resolve/main/config.json",
        R.CONFIG_ERROR,
    ),
    # A disk quota in any case, over memory words around it.
    ("disk-quota", "OSError: [Errno 122] EDQUOT writing '/home/u/ckpt/model.safetensors'", R.DISK_FULL),
    (
        "disk-quota",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: /scratch/run/ckpt-3.data-00000-of-00001.tempstate; disk quota exceeded",
        R.DISK_FULL,
    ),
    # An upload hook at the end of training failing, whatever it raised.
    (
        "end-upload",
        _tb(
            "KeyError: 'metrics'",
            "transformers/trainer.py:train",
            "transformers/trainer_callback.py:on_train_end",
            "mytool/hub_callback.py:on_train_end",
        ),
        R.HUB_ERROR,
    ),
    (
        "end-upload",
        _tb(
            "TypeError: 'NoneType' object is not subscriptable",
            "lightning/pytorch/trainer/call.py:_call_callback_hooks",
            "mlops/registry_upload.py:on_fit_end",
        ),
        R.HUB_ERROR,
    ),
    # A server error in a client library's words, under a hedge about preemption.
    (
        "server-status",
        "INFO:tensorflow:An error was raised. This may be due to a preemption in a connected worker or parameter server.\nAll 10 retry attempts failed. The last failure: Unavailable: Error executing an HTTP request: HTTP response code 502",
        R.INFRA_TRANSIENT,
    ),
    # torch.save's short write after memory ran out in the chain: the RAM; alone it stays the disk.
    (
        "short-write",
        _tb("MemoryError", "torch/serialization.py:_save")
        + "\n\nDuring handling of the above exception, another exception occurred:\n\n"
        + _tb(
            "RuntimeError: [enforce fail at inline_container.cc:337] . unexpected pos 4412 vs 4300",
            "torch/serialization.py:__exit__",
        ),
        R.OOM,
    ),
    (
        "short-write",
        _tb(
            "RuntimeError: [enforce fail at inline_container.cc:337] . unexpected pos 4412 vs 4300",
            "torch/serialization.py:__exit__",
        ),
        R.DISK_FULL,
    ),
    # A framework calling a hook or callback whose signature does not fit: an API mismatch.
    (
        "hook-signature",
        _tb(
            "TypeError: MyCallback.on_validation_end() takes 2 positional arguments but 3 were given",
            "lightning/pytorch/trainer/call.py:_call_callback_hooks",
        ),
        R.CONFIG_ERROR,
    ),
    (
        "hook-signature",
        _tb(
            "TypeError: CustomTrainer.compute_loss() got an unexpected keyword argument 'num_items_in_batch'",
            "transformers/trainer.py:training_step",
        ),
        R.CONFIG_ERROR,
    ),
    # Round 11's classes, in other tools' words than its logs'. Data with no examples at all (bad_input, not a refused
    # setting, though the writer says "please pass").
    (
        "empty-data",
        _tb(
            "IndexError: Invalid key: 0 is out of bounds for size 0",
            "datasets/arrow_dataset.py:__getitem__",
            "datasets/formatting/formatting.py:_check_valid_index_key",
        ),
        R.BAD_INPUT,
    ),
    ("empty-data", 'ValueError: Instruction "train" corresponds to no data!', R.BAD_INPUT),
    (
        "empty-data",
        _tb("ValueError: The training dataset is empty after filtering.", "trl/trainer/sft_trainer.py:__init__"),
        R.BAD_INPUT,
    ),
    ("empty-data", "[ERROR] No valid samples were found in the dataset, please check the data format.", R.BAD_INPUT),
    (
        "empty-data",
        _tb("RuntimeError: The dataset contains no examples after preprocessing", "swift/llm/dataset/loader.py:load"),
        R.BAD_INPUT,
    ),
    # A tool refusing a model's architecture or type, inside other words or another language.
    (
        "architecture",
        "llama_model_load: error loading model: 模型加载失败 unsupported model architecture 'deepseek2'",
        R.CONFIG_ERROR,
    ),
    (
        "architecture",
        _tb("ValueError: Model type qwen3_moe not supported.", "mlx_lm/utils.py:_get_classes"),
        R.CONFIG_ERROR,
    ),
    (
        "architecture",
        "2024-05-01T10:00:00Z ERROR text_generation_launcher: Unsupported model type phi3v",
        R.CONFIG_ERROR,
    ),
    (
        "architecture",
        _tb("TypeError: gemma2 isn't supported yet.", "awq/models/auto.py:check_and_get_model_type"),
        R.CONFIG_ERROR,
    ),
    (
        "architecture",
        "Error: architecture MllamaForConditionalGeneration is not supported by this converter",
        R.CONFIG_ERROR,
    ),
    # Saving refused tensors sharing memory (tied weights): the save's settings.
    (
        "shared-tensors",
        _tb(
            "RuntimeError: The weights trying to be saved contained shared tensors [{'lm_head.weight', 'model.embed_tokens.weight'}] that are mismatching the transformers base configuration. Try saving using `safe_serialization=False` or remove this tensor sharing.",
            "transformers/modeling_utils.py:save_pretrained",
        ),
        R.CONFIG_ERROR,
    ),
    (
        "shared-tensors",
        _tb(
            "ValueError: You are trying to save a non contiguous tensor: `encoder.weight` which is not allowed. It either means you are trying to save tensors which are reference of each other in which case it's recommended to save only the full tensors, and reslice at load time, or simply call `.contiguous()` on your tensor to pack it before saving.",
            "safetensors/torch.py:_flatten",
        ),
        R.CONFIG_ERROR,
    ),
    # A KeyError keyed by a precision, device or implementation: a table of settings, not a data column.
    (
        "setting-key",
        _tb("KeyError: '16-mixed'", "lightning/fabric/connector.py:_check_config_and_set_final_flags"),
        R.CONFIG_ERROR,
    ),
    ("setting-key", _tb("KeyError: 'torch.float8_e4m3fn'", "mylib/flops.py:lookup"), R.CONFIG_ERROR),
    ("setting-key", "KeyError: 'no peak FLOPs entry for device NVIDIA L4'", R.CONFIG_ERROR),
    ("setting-key", _tb("KeyError: 'text'", "job/data.py:preprocess_function"), R.BAD_INPUT),
    # An assertion in the code checking its arguments (a constructor, a validator): the caller passed what it refuses.
    ("argument-assertion", _tb("AssertionError", "vllm/config.py:__post_init__"), R.CONFIG_ERROR),
    (
        "argument-assertion",
        _tb("AssertionError: world size must divide heads", "megatron/arguments.py:validate_args"),
        R.CONFIG_ERROR,
    ),
    # A feature the GPU cannot run, by what it requires.
    (
        "gpu-capability",
        _tb(
            "RuntimeError: FP8 quantization requires a GPU with compute capability 8.9 or newer",
            "vllm/model_executor/layers/quantization/fp8.py:__init__",
        ),
        R.CONFIG_ERROR,
    ),
    (
        "gpu-capability",
        _tb(
            "ValueError: The quantization method awq_marlin is not supported for the current GPU. Minimum capability: 80. Current capability: 75.",
            "vllm/config.py:_verify_quantization",
        ),
        R.CONFIG_ERROR,
    ),
    ("gpu-capability", "NotImplementedError: Flash Llama requires Flash Attention v2 enabled models.", R.CONFIG_ERROR),
]


@pytest.mark.parametrize(
    ("family", "log", "expected"), CATALOGUE, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(CATALOGUE)]
)
def test_each_wording_is_named(family: str, log: str, expected: R) -> None:
    assert explain(log, exit_code=1).reason is expected


def test_the_catalogue_is_broad() -> None:
    families = {family for family, _, _ in CATALOGUE}
    assert len(CATALOGUE) >= 60 and len(families) >= 15


RANK_OOM = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/job/train.py", line 9, in <module>',
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]
WATCHDOG = [
    "[rank0]:[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
    "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
    "[rank0]: Traceback (most recent call last):",
    f'[rank0]:   File "{SITE}/torch/distributed/distributed_c10d.py", line 1, in all_reduce',
    "[rank0]: torch.distributed.DistBackendError: [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
]
CHILD_FAILED = [
    "Traceback (most recent call last):",
    f'  File "{SITE}/torch/distributed/run.py", line 1, in main',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "train.py FAILED",
    "  exitcode  : 1 (pid: 4242)",
]
RANK_CONFIG = [
    "[rank1]: Traceback (most recent call last):",
    f'[rank1]:   File "{SITE}/peft/tuners/tuners_utils.py", line 1, in inject_adapter',
    "[rank1]: ValueError: Target modules {'q_proj'} not found in the base model.",
]


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        # One rank's error, then another's NCCL watchdog (it waited for the dead rank), then torchrun's summary.
        ([*RANK_OOM, *WATCHDOG, *CHILD_FAILED], R.OOM),
        ([*RANK_CONFIG, *WATCHDOG, *CHILD_FAILED], R.CONFIG_ERROR),
        # The watchdog's own line printed last, after the root cause's traceback.
        ([*RANK_OOM, WATCHDOG[0]], R.OOM),
        # The watchdog alone: a collective that timed out, with nothing before it to blame.
        (WATCHDOG, R.INFRA_TRANSIENT),
    ],
)
def test_a_later_generic_line_does_not_override_the_root_cause(tail: list[str], expected: R) -> None:
    assert explain("\n".join(tail), exit_code=1).reason is expected


ENGINE_ECHO = [
    "Traceback (most recent call last):",
    f'  File "{SITE}/vllm/v1/engine/core_client.py", line 1, in __init__',
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
]
BNB_BANNER = ["CUDA SETUP: CUDA detection failed! Possible reasons:", "CUDA SETUP: Setup Failed!"]
CTRL_C = ["Traceback (most recent call last):", '  File "/job/train.py", line 3, in <module>', "KeyboardInterrupt"]


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        # vLLM's engine client only points back at its engine process's error.
        ([*RANK_OOM, *ENGINE_ECHO], R.OOM),
        # bitsandbytes' setup banner is printed on import; the job then failed for a reason of its own.
        ([*BNB_BANNER, *RANK_CONFIG], R.CONFIG_ERROR),
        # Ctrl-C on a job hung after a rank's OOM: the OOM ended it, the interrupt only stopped the wait.
        ([*RANK_OOM, *CTRL_C], R.OOM),
        # Ctrl-C alone is someone stopping the job.
        (CTRL_C, R.CANCELLED),
        # The cloud's notice outranks the interrupt its SIGTERM/SIGINT raised in the job.
        (["GCP Metadata Service says termination is imminent", *CTRL_C], R.PREEMPTED),
        # A failed extension build the job recovered from (a fallback kernel) is not why a later OOM ended it.
        (["ninja: build stopped: subcommand failed.", *RANK_OOM], R.OOM),
    ],
)
def test_a_sweep_wording_does_not_override_the_root_cause(tail: list[str], expected: R) -> None:
    assert explain("\n".join(tail), exit_code=1).reason is expected


# Round 12's classes, in other tools' and threads' words than its logs' (each failed on the rules before them). A
# KeyError keyed by a model-config field or a tensor type is a converter or loader not supporting the model; an
# exception quoted inside a worker's or remote task's is read as itself; a vocabulary grown by added tokens met in a
# merge's or delta's arithmetic; a value above a `max_*` setting (config_error).
ROUND_12 = [
    _tb(
        "KeyError: 'num_attention_heads'",
        "llama.cpp/convert_hf_to_gguf.py:write",
        "llama.cpp/convert_hf_to_gguf.py:modify_tensors",
    ),
    "KeyError: \"could not find any of: ['num_local_experts', 'num_experts']\"",
    _tb("KeyError: 'architectures'", "llama.cpp/convert-hf-to-gguf.py:<module>"),
    _tb("KeyError: 'F8_E4M3'", "llama.cpp/convert.py:convert"),
    _tb("KeyError: torch.float8_e4m3fn", "gguf/gguf_writer.py:add_tensor"),
    _tb(
        "ray.exceptions.RayTaskError(KeyError): ray::WorkerDict.init_model() (pid=4, ip=10.0.0.2) KeyError: 'rope_theta'",
        "ray/_private/worker.py:get",
    ),
    "RuntimeError: Worker failed with error KeyError('hidden_size'), please check the stack trace above for the root cause",
    "RuntimeError: Engine process failed with error 'LoRA rank 128 is greater than max_lora_rank 64.'",
    _tb(
        "RuntimeError: The size of tensor a (32000) must match the size of tensor b (32003) at non-singleton dimension 0",
        "fastchat/model/apply_delta.py:apply_delta",
    ),
    "RuntimeError: The size of tensor a (128256) must match the size of tensor b (128258) at non-singleton dimension 0",
]


@pytest.mark.parametrize("log", ROUND_12)
def test_round_12_classes_are_config_errors(log: str) -> None:
    assert explain(log, exit_code=1).reason is R.CONFIG_ERROR


@pytest.mark.parametrize(
    "log",
    [
        # Sizes that are no vocabulary's (an audio frame count, a doubled hidden size): a shape bug, not added tokens.
        "RuntimeError: The size of tensor a (8000) must match the size of tensor b (8001) at non-singleton dimension 3",
        "RuntimeError: The size of tensor a (4015) must match the size of tensor b (8030) at non-singleton dimension 1",
        # A data record's column, even through a worker's wrapper, stays the data's.
        "RuntimeError: Worker failed with error KeyError('text')",
    ],
)
def test_round_12_classes_stay_narrow(log: str) -> None:
    assert explain(log, exit_code=1).reason is not R.CONFIG_ERROR


# Round 13's classes, in other tools' and threads' words than its logs' (each failed on the rules before them): a
# wording pasted without the backticks markdown took as code spans; a training script's own words for a non-finite
# loss; a client that waited for a server the job is set up to use; macOS's shell reporting its child killed
# (`Killed: 9`); a cluster manager losing nodes to the platform; a row's value of the wrong type met where rows are
# read; a push's own code failing; a frame line whose indentation a paste lost.
ROUND_13: list[tuple[str, R]] = [
    (
        "/pytorch/aten/src/ATen/native/hip/Indexing.hip:1231: indexSelectLargeIndex: Device-side assertion "
        "`srcIndex < srcSelectDimSize' failed.",
        R.CONFIG_ERROR,
    ),
    (
        "../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
        "thread: [5,0,0] Assertion t >= 0 && t < n_classes failed.",
        R.BAD_INPUT,
    ),
    ("Please launch distributed training with llamafactory-cli or torchrun.", R.CONFIG_ERROR),
    ("loss value not finite at iteration 200, stopping", R.DIVERGED),
    ("NaN loss detected at step 120, aborting run", R.DIVERGED),
    ("[trainer] Non-finite loss encountered; terminating.", R.DIVERGED),
    (
        "ConnectionError: The vLLM server can't be reached at 0.0.0.0:8000 after 240 seconds. Make sure the server is "
        "running by running `trl vllm-serve`.",
        R.CONFIG_ERROR,
    ),
    ("WARNING reward_client: reward model server is not ready yet, retrying in 5s (attempt 12/60)", R.CONFIG_ERROR),
    ("generation endpoint http://localhost:30000 isn't up yet; will retry", R.CONFIG_ERROR),
    ("./train.sh: line 12: 31337 Killed: 9               python train.py --config a.yaml", R.OOM),
    ("Killed: 9", R.OOM),
    (
        "Node ip-10-0-1-7 is being drained (reason: spot-interruption)\n"
        + _tb("RuntimeError: Placement group creation timed out", "ray/util/placement_group.py:wait"),
        R.PREEMPTED,
    ),
    ("(autoscaler +2m) Instance gpu-worker-3 was terminated (reason: maintenance-event)", R.PREEMPTED),
    (
        _tb('TypeError: can only concatenate str (not "NoneType") to str', "proj/data.py:preprocess_function"),
        R.BAD_INPUT,
    ),
    (
        _tb(
            'TypeError: can only concatenate str (not "float") to str',
            "alpaca/finetune.py:generate_and_tokenize_prompt",
        ),
        R.BAD_INPUT,
    ),
    (_tb("TypeError: 'NoneType' object is not subscriptable", "proj/prompts.py:format_example"), R.BAD_INPUT),
    (
        'File "/job/prep.py", line 3, in tokenize_function\n    return tok(example["text"])\n'
        "TypeError: object of type 'NoneType' has no len()",
        R.BAD_INPUT,
    ),
    (
        _tb(
            "AttributeError: 'NoneType' object has no attribute 'append'",
            "transformers/modeling_utils.py:push_to_hub",
            "transformers/utils/hub.py:create_and_tag_model_card",
        ),
        R.HUB_ERROR,
    ),
    (
        _tb("RuntimeError: Unsloth: Merging failed to save tokenizer", "unsloth/save.py:unsloth_push_to_hub_merged"),
        R.HUB_ERROR,
    ),
    (
        _tb(
            "KeyError: 'base_model'",
            "huggingface_hub/hf_api.py:upload_folder",
            "huggingface_hub/hf_api.py:create_commit",
        ),
        R.HUB_ERROR,
    ),
]


@pytest.mark.parametrize(("log", "expected"), ROUND_13)
def test_round_13_classes_are_named(log: str, expected: R) -> None:
    assert explain(log).reason is expected


@pytest.mark.parametrize(
    ("log", "not_expected"),
    [
        # Advice in the words of a non-finite loss, and fp16's loss scale, which is no loss.
        ("if the loss is not finite, the step is skipped", R.DIVERGED),
        ("Attempted loss scale: 65536 not finite, reducing to 32768", R.DIVERGED),
        # A server still loading, and a connection that dropped, are no server left unstarted.
        ("text_generation_launcher: Waiting for shard to be ready... rank=0", R.CONFIG_ERROR),
        (
            "requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed "
            "connection without response'))",
            R.CONFIG_ERROR,
        ),
        # A shell's report of a crash is no SIGKILL.
        ("/bin/sh: line 1: 99 Abort trap: 6 python train.py", R.OOM),
        # The autoscaler scaling down an idle node is its own doing, not the platform taking machines.
        (
            "(autoscaler +10m) Instance k-0001 (node IP: 10.1.1.1) will be terminated soon (reason: idle).\n"
            + _tb("RuntimeError: Failed to create placement group", "ray/util/placement_group.py:wait"),
            R.PREEMPTED,
        ),
        # The same TypeError loading a model, or in the script's own body, is no data row's.
        (_tb("TypeError: 'NoneType' object is not subscriptable", "proj/models.py:load_model"), R.BAD_INPUT),
        (_tb("TypeError: unsupported operand type(s) for +: 'NoneType' and 'str'"), R.BAD_INPUT),
        # A push given a folder the job never wrote, or called with an argument it does not take, is the argument's.
        (
            _tb("ValueError: Provided path: 'out' is not a directory", "huggingface_hub/hf_api.py:upload_folder"),
            R.HUB_ERROR,
        ),
        (
            _tb(
                "TypeError: push_to_hub() got an unexpected keyword argument 'privat'",
                "transformers/trainer.py:push_to_hub",
            ),
            R.HUB_ERROR,
        ),
    ],
)
def test_round_13_classes_stay_narrow(log: str, not_expected: R) -> None:
    assert explain(log).reason is not not_expected


# A CUDA kernel's illegal memory access reads as an install that does not fit only before any training step; after
# steps ran on the same kernels (a logged loss, a progress bar past 0) it is unknown, and says why.
@pytest.mark.parametrize(
    ("before", "expected"),
    [
        ([], R.DEPENDENCY_ERROR),
        (["  0%|          | 0/1000 [00:00<?, ?it/s]"], R.DEPENDENCY_ERROR),
        (["{'loss': 1.23, 'learning_rate': 1e-05, 'epoch': 0.5}"], R.UNKNOWN),
        (
            [" 40%|████      | 400/1000 [2:00:00<3:00:00,  1.2s/it]", "terminate called after throwing an instance"],
            R.UNKNOWN,
        ),
    ],
)
def test_an_illegal_access_after_training_steps_is_no_install(before: list[str], expected: R) -> None:
    verdict = explain("\n".join([*before, "  what():  CUDA error: an illegal memory access was encountered"]))
    assert verdict.reason is expected
    assert ("after training steps had run" in verdict.message) is (expected is R.UNKNOWN)


def test_rays_guess_at_a_workers_death_says_it_is_a_guess() -> None:
    hedge = (
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. "
        "(1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called."
    )
    verdict = explain(hedge)
    assert verdict.reason is R.OOM and "possible causes" in verdict.message
    assert "possible causes" not in explain("(raylet) Task was killed due to the node running low on memory.").message


# Round 14's classes, in other tools' and threads' words than its logs' (each failed on the rules before them): access
# to a gated repo not granted, in a tool's or the Hub's words; a model, adapter or checkpoint file not at the path
# given; a reward function missing a parameter the trainer fills from the dataset's columns; a program's command-line
# entry looking up a name it does not have; an assertion in a checker by any word of its name; a failure no rule reads
# while the job uploads what it finished training.
ROUND_14: list[tuple[str, R]] = [
    ("Your request to access model meta-llama/Llama-3.1-8B is awaiting a review from the repo authors.", R.AUTH_ERROR),
    ("OSError: Unable to access gated model google/gemma-2-9b with the token provided.", R.AUTH_ERROR),
    ("Error: you need to agree to share your contact information to access this model", R.AUTH_ERROR),
    (
        "DatasetNotFoundError: Dataset 'acme/speech' is a gated dataset on the Hub. Visit the dataset page at "
        "https://huggingface.co/datasets/acme/speech to ask for access.",
        R.AUTH_ERROR,
    ),
    (
        "FileNotFoundError: [Errno 2] No such file or directory: 'output/checkpoint-500/adapter_model.safetensors'",
        R.CONFIG_ERROR,
    ),
    ("gguf_init_from_file: failed to open 'models/llama-7b.Q4_K_M.gguf': 'No such file or directory'", R.CONFIG_ERROR),
    ("cp: cannot stat 'out/final/pytorch_model.bin': No such file or directory", R.CONFIG_ERROR),
    (
        _tb(
            "OSError: [Errno 2] No such file or directory: '/ckpt/llama/tokenizer.model'",
            "sentencepiece/__init__.py:Load",
        ),
        R.CONFIG_ERROR,
    ),
    ("TypeError: CosineReward.__call__() missing 1 required positional argument: 'solution'", R.BAD_INPUT),
    ("TypeError: format_reward_func() missing 1 required positional argument: 'answer'", R.BAD_INPUT),
    (
        _tb(
            "TypeError: math_reward() missing 2 required positional arguments: 'ground_truth' and 'data_source'",
            "trl/trainer/grpo_trainer.py:_calculate_rewards",
        ),
        R.BAD_INPUT,
    ),
    (_tb("KeyError: 'grpo'", "llamafactory/cli.py:main"), R.CONFIG_ERROR),
    (_tb("KeyError: 'mmlu_pro_x'", "lm_eval/__main__.py:cli_evaluate"), R.CONFIG_ERROR),
    (_tb("KeyError: 'dpo'", "xtuner/tools/cli/main.py:dispatch_command"), R.CONFIG_ERROR),
    (
        _tb(
            "AssertionError: DeepSpeedConfig: gradient_accumulation_steps must be positive",
            "deepspeed/runtime/config.py:__init__",
            "deepspeed/runtime/config.py:_do_error_check",
        ),
        R.CONFIG_ERROR,
    ),
    (_tb("AssertionError", "proj/launch.py:run", "proj/launch.py:config_sanity_check"), R.CONFIG_ERROR),
    (
        "{'train_runtime': 1234.5, 'train_samples_per_second': 3.2, 'train_loss': 0.91, 'epoch': 3.0}\n"
        "Uploading the final model to the Hub...\n"
        + _tb("RuntimeError: unexpected state of the upload queue", "proj/export.py:finish"),
        R.HUB_ERROR,
    ),
    (
        "Training completed. Do not forget to share your model on huggingface.co/models =)\n"
        "Pushing to hub acme/llama-sft ...\nTraceback (most rec",
        R.HUB_ERROR,
    ),
    (
        "Saving merged model to out/merged\nuploading 4 files to s3://acme-models/merged\nSegmentation fault",
        R.HUB_ERROR,
    ),
]


@pytest.mark.parametrize(("log", "expected"), ROUND_14)
def test_round_14_classes_are_named(log: str, expected: R) -> None:
    assert explain(log).reason is expected


@pytest.mark.parametrize(
    ("log", "not_expected"),
    [
        # The Hub's hint after a repo it cannot find, and advice about gated models, are no refusal of access.
        (
            "Repository Not Found for url: https://huggingface.co/api/models/acme/x. Please make sure you specified "
            "the correct `repo_id`. If you are trying to access a private or gated repo, make sure you are "
            "authenticated.",
            R.AUTH_ERROR,
        ),
        ("Note: meta-llama/Llama-2-7b-hf is a gated model; request access before running this script.", R.AUTH_ERROR),
        # A data file or a row's image is the data's, not a model path.
        ("FileNotFoundError: [Errno 2] No such file or directory: 'data/shakespeare/train.bin'", R.CONFIG_ERROR),
        ("FileNotFoundError: [Errno 2] No such file or directory: '/data/images/model_0001.jpg'", R.CONFIG_ERROR),
        # What the trainer passes itself, a model, or another package's method: a call of another API.
        ("TypeError: accuracy_reward() missing 1 required positional argument: 'completions'", R.BAD_INPUT),
        ("TypeError: get_reward() missing 1 required positional argument: 'model'", R.BAD_INPUT),
        ("TypeError: length_reward() missing 1 required positional argument: 'trainer_state'", R.BAD_INPUT),
        (
            "TypeError: RewardTrainer.compute_loss() missing 1 required positional argument: 'num_items_in_batch'",
            R.BAD_INPUT,
        ),
        # A KeyError in the user's own script, or deeper than the entry, is no command line's.
        (_tb("KeyError: 'text'"), R.CONFIG_ERROR),
        (_tb("KeyError: 'text'", "llamafactory/cli.py:main", "llamafactory/data/loader.py:load_rows"), R.CONFIG_ERROR),
        # A push during training (training went on after it), and a finished run that failed before any upload.
        (
            "Pushing checkpoint-500 to hub\n{'loss': 1.2, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
            + _tb("RuntimeError: unexpected state"),
            R.HUB_ERROR,
        ),
        (
            "{'train_runtime': 12.5, 'train_loss': 0.9, 'epoch': 1.0}\n" + _tb("RuntimeError: unexpected state"),
            R.HUB_ERROR,
        ),
    ],
)
def test_round_14_classes_stay_narrow(log: str, not_expected: R) -> None:
    assert explain(log).reason is not not_expected


def test_an_assertion_outside_a_checker_is_only_a_guess() -> None:
    """An assertion in a function that checks nothing (loading a checkpoint) is no rejected argument: at most its type's
    prior reads it, as a best guess that says so."""
    verdict = explain(_tb("AssertionError", "deepspeed/runtime/engine.py:load_checkpoint"))
    assert verdict.message.startswith("Best guess from the exception's type alone")


def test_a_missing_media_file_says_to_check_the_media_folder() -> None:
    verdict = explain("FileNotFoundError: [Errno 2] No such file or directory: '/data/coco/train2014/000000185326.jpg'")
    assert verdict.reason is R.BAD_INPUT and "media folder argument" in verdict.message


def _ipynb(*printed: str) -> str:
    """A cell's error output as the .ipynb file stores it: each printed line a JSON string, colours escaped."""
    strings = ",\n".join(f'   "{line}\\n"' for line in printed)
    return '  {\n   "output_type": "error",\n   "traceback": [\n' + strings + "\n   ]\n  }"


def _importing(code: str, error: str, *frames: str) -> str:
    """A traceback that starts at the job's import statement, raised through installed packages' frames."""
    lines = ["Traceback (most recent call last):", '  File "/job/train.py", line 3, in <module>', f"    {code}"]
    for frame in frames:
        path, _, function = frame.partition(":")
        lines += [f'  File "{SITE}/{path}", line 1, in {function or "<module>"}', "    x = y"]
    return "\n".join([*lines, error])


# Round 15's classes, in other tools' and threads' words than its logs' (all but the peft import failed on the rules
# before them, which read its module attribute as an install): a notebook's output pasted as the .ipynb JSON (escaped
# newlines and colours) and an exception printed as `<class 'X'>:`; the disk full in Go's, Node's and Windows' words;
# llama.cpp's binaries not built, in an exporter's or the shell's words; a name another project's module does not have
# (an API mismatch); an API refusing its key, as its client prints the response; verl's reward dispatch by a row's
# data_source; a list where the code reads a record; an exception raised inside installed packages while the job's code
# imports one; a failure no rule reads while a trained model is exported for its upload.
ROUND_15: list[tuple[str, R]] = [
    (_ipynb("\\u001b[0;31mKeyError\\u001b[0m: 'instruction'"), R.BAD_INPUT),
    (
        '{"name": "stderr", "output_type": "stream", "text": ["Map: 100%|##########| 500/500\\n", "KeyError: \'output\'\\n"]}',
        R.BAD_INPUT,
    ),
    ("<class 'KeyError'>: 'conversations'", R.BAD_INPUT),
    ("Error: mkdir /var/lib/docker/overlay2/3f2a/merged: no space left on device", R.DISK_FULL),
    ("Error: ENOSPC: no space left on device, write", R.DISK_FULL),
    ("OSError: [WinError 112] There is not enough space on the disk", R.DISK_FULL),
    ("/bin/sh: 1: llama.cpp/llama-quantize: not found", R.DEPENDENCY_ERROR),
    ("RuntimeError: Unsloth: No working quantizer found in /root/llama.cpp", R.DEPENDENCY_ERROR),
    ("AttributeError: module 'transformers.deepspeed' has no attribute 'is_deepspeed_zero3_enabled'", R.CONFIG_ERROR),
    ("ERROR: eval failed: module 'vllm.sampling_params' has no attribute 'GuidedDecodingParams'", R.CONFIG_ERROR),
    (
        "anthropic.AuthenticationError: Error code: 401 - {'type': 'error', 'error': {'type': 'authentication_error', "
        "'message': 'invalid x-api-key'}}",
        R.AUTH_ERROR,
    ),
    (
        "judge failed: PermissionDeniedError: Error code: 403 - {'error': {'message': 'Project does not have access to "
        "model gpt-4o', 'type': 'invalid_request_error'}}",
        R.AUTH_ERROR,
    ),
    ("google.api_core.exceptions.InvalidArgument: 400 API key not valid. Please pass a valid API key.", R.AUTH_ERROR),
    ("NotImplementedError: Reward function is not implemented for data_source=''", R.BAD_INPUT),
    ("NotImplementedError: Reward function is not implemented for data_source='acme/chemistry_qa'", R.CONFIG_ERROR),
    (
        _tb("AttributeError: 'list' object has no attribute 'get'", "unsloth/chat_templates.py:standardize_sharegpt"),
        R.BAD_INPUT,
    ),
    ("AttributeError: 'list' object has no attribute 'items'", R.BAD_INPUT),
    (
        _importing(
            "from trl import SFTTrainer",
            "TypeError: '<' not supported between instances of 'Version' and 'str'",
            "trl/__init__.py",
            "trl/import_utils.py",
        ),
        R.DEPENDENCY_ERROR,
    ),
    (
        _importing(
            "import peft",
            "AttributeError: module 'torch.distributed' has no attribute 'tensor'",
            "peft/__init__.py",
            "peft/utils/integrations.py",
        ),
        R.DEPENDENCY_ERROR,
    ),
    (
        "ValueError                                Traceback (most recent call last)\n"
        "Cell In[1], line 2\n"
        "      1 import os\n"
        "----> 2 from unsloth import FastLanguageModel\n"
        "File /usr/local/lib/python3.11/dist-packages/unsloth/models/_utils.py:88\n"
        "---> 88 raise ValueError(f'Unsloth: bad version {v}')\n"
        "ValueError: Unsloth: bad version None",
        R.DEPENDENCY_ERROR,
    ),
    (
        "Unsloth: Merging 4bit and LoRA weights to 16bit...\nUnsloth: Saving tokenizer... Done.\n"
        "RuntimeError: Unsloth: Quantization failed for /content/model-unsloth.F16.gguf",
        R.HUB_ERROR,
    ),
    (
        "Converting the merged model to GGUF (q8_0)...\n"
        + _tb("RuntimeError: converter exited with status 1", "trainer_kit/export.py:to_gguf"),
        R.HUB_ERROR,
    ),
]


@pytest.mark.parametrize(("log", "expected"), ROUND_15)
def test_round_15_classes_are_named(log: str, expected: R) -> None:
    assert explain(log).reason is expected


@pytest.mark.parametrize(
    ("log", "not_expected"),
    [
        # A bytes repr ending in an escaped newline is one line of a message, not a notebook's output.
        ("Error: Error quantizing: b\"main: invalid nthread 'Q8_0' (stoi)\\n\"", R.UNKNOWN),
        # gguf-py older than its own converter is an install (families), and a module caught half-imported (a file
        # shadowing the package) is no API mismatch.
        ("AttributeError: module 'gguf.constants' has no attribute 'MODEL_ARCH'", R.CONFIG_ERROR),
        # A 401 for a Hub repo that is not there is no refused key.
        (
            "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. Repository Not Found for url: https://huggingface.co/api/models/acme/none",
            R.AUTH_ERROR,
        ),
        # A string, a tuple or None asked for a mapping's method is as often a setting or a model's output.
        ("AttributeError: 'str' object has no attribute 'keys'", R.BAD_INPUT),
        ("AttributeError: 'tuple' object has no attribute 'items'", R.BAD_INPUT),
        ("AttributeError: 'NoneType' object has no attribute 'get'", R.BAD_INPUT),
        # The job's own module failing as it is imported is the job's code, not the install.
        (
            'Traceback (most recent call last):\n  File "/job/train.py", line 3, in <module>\n    from mydata import rows\n'
            '  File "/job/mydata.py", line 9, in <module>\n    rows = load()\nValueError: bad row 7',
            R.DEPENDENCY_ERROR,
        ),
        # A call of the job's own code into a package (not an import) keeps round 10's reading.
        (
            _tb(
                "AttributeError: module 'lm_eval.tasks' has no attribute 'initialize_tasks'",
                "lm_eval/evaluator.py:simple_evaluate",
            ),
            R.DEPENDENCY_ERROR,
        ),
        # llama.cpp's own converter run by hand, failing: not a trainer exporting what it trained.
        ("INFO:hf-to-gguf:Loading model: acme-7b\n" + _tb("RuntimeError: unexpected tensor layout"), R.HUB_ERROR),
    ],
)
def test_round_15_classes_stay_narrow(log: str, not_expected: R) -> None:
    assert explain(log).reason is not not_expected


def test_a_notebooks_json_output_is_read_as_the_lines_it_prints() -> None:
    from jobtrail.outcomes.lines import clean, split

    lines = [clean(line) for line in split(_ipynb('\\u001b[0;31mValueError\\u001b[0m: bad \\"x\\"', "done"))]
    assert 'ValueError: bad "x"' in lines and "done" in lines
    assert split('print("a\\\\n")\nplain line') == ['print("a\\\\n")', "plain line"]


# Round 16's classes, in other tools' and clients' words than its logs' (14 of the 17 failed on the rules before them;
# a missing module, and TransformerEngine's and Triton's fp8 refusals, were read by other words): an exception a program caught and reported within a line of its own words
# (`Type: message` after them, or its repr), read by the rules that read it raised; a client's own exception type for
# credentials refused or missing; a kernel checking the GPU's architecture (the GPU cannot run the setting); the Hub's
# LFS storage refusing an upload, in an HTTP client's words.
ROUND_16: list[tuple[str, R]] = [
    (
        "2024-06-01 09:12:44 | ERROR | The model 'acme/tiny-gguf' could not be loaded. The error was "
        "NotImplementedError('Loading a GGUF checkpoint is not supported yet')",
        R.CONFIG_ERROR,
    ),
    ("[eval] run aborted: RuntimeError: Unsloth: Please install llama.cpp first", R.DEPENDENCY_ERROR),
    ("Worker 2 stopped; the error was ModuleNotFoundError(\"No module named 'flash_attn'\")", R.DEPENDENCY_ERROR),
    ("Could not start: ValueError('--bf16 and --fp16 are mutually exclusive')", R.CONFIG_ERROR),
    (
        "anthropic.PermissionDeniedError: Your API key does not have permission to use the specified resource.",
        R.AUTH_ERROR,
    ),
    (
        "azure.core.exceptions.ClientAuthenticationError: DefaultAzureCredential failed to retrieve a token from the included credentials.",
        R.AUTH_ERROR,
    ),
    (
        _tb("botocore.exceptions.NoCredentialsError: Unable to locate credentials", "botocore/auth.py:add_auth"),
        R.AUTH_ERROR,
    ),
    ("google.auth.exceptions.DefaultCredentialsError: Your default credentials were not found.", R.AUTH_ERROR),
    (
        "cohere.errors.unauthorized_error.UnauthorizedError: status_code: 401, body: {'message': 'invalid api token'}",
        R.AUTH_ERROR,
    ),
    ("RuntimeError: Expected dprops->major >= 8 to be true, but got false.", R.CONFIG_ERROR),
    ("RuntimeError: FlashAttention backward for head dim > 192 requires A100/A800 or H100/H800", R.CONFIG_ERROR),
    ("AssertionError: Device compute capability 8.9 or higher required for FP8 execution.", R.CONFIG_ERROR),
    (
        "ptxas /tmp/tmpk2/kernel.ptx, line 71; error   : Feature '.bf16' requires .target sm_80 or higher",
        R.CONFIG_ERROR,
    ),
    (
        "AssertionError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')",
        R.CONFIG_ERROR,
    ),
    (
        "huggingface_hub.utils._errors.HfHubHTTPError: 403 Client Error: Forbidden for url: "
        "https://hf-hub-lfs-us-east-1.s3-accelerate.amazonaws.com/repos/aa/bb/cc?X-Amz-Algorithm=AWS4-HMAC-SHA256",
        R.HUB_ERROR,
    ),
    (
        "httpx.HTTPStatusError: Client error '403 Forbidden' for url "
        "'https://s3.us-east-1.amazonaws.com/lfs.huggingface.co/repos/aa/bb/cc?partNumber=1'",
        R.HUB_ERROR,
    ),
    (
        "aiohttp.client_exceptions.ClientResponseError: 400, message='Bad Request', "
        "url=URL('https://s3.amazonaws.com/lfs.huggingface.co/repos/aa/bb/cc?partNumber=2')",
        R.HUB_ERROR,
    ),
]


@pytest.mark.parametrize(("log", "expected"), ROUND_16)
def test_round_16_classes_are_named(log: str, expected: R) -> None:
    assert explain(log).reason is expected


_STORAGE = "https://s3.us-east-1.amazonaws.com/lfs.huggingface.co/repos/aa/bb/cc"


@pytest.mark.parametrize(
    ("log", "not_expected"),
    [
        # A reported failure that training went on after is not why the job ended.
        (
            "WARNING could not reach the tracker: RuntimeError('offline mode is not supported')\n"
            "{'loss': 1.2, 'learning_rate': 1e-05, 'epoch': 0.1}\n{'loss': 1.1, 'learning_rate': 1e-05, 'epoch': 0.2}",
            R.CONFIG_ERROR,
        ),
        # A traceback cut after its frames: the source line raising an exception holds the code's words, not a report.
        (
            'Traceback (most recent call last):\n  File "/job/train.py", line 3, in <module>\n    main()\n'
            '  File "/job/train.py", line 9, in main\n    raise RuntimeError("bf16 is not supported here")',
            R.CONFIG_ERROR,
        ),
        # Two of the job's own processes failing their handshake, and code naming the type, are no refused credentials;
        # nor is a file's permission.
        ("multiprocessing.context.AuthenticationError: digest received was wrong", R.AUTH_ERROR),
        (
            'Traceback (most recent call last):\n  File "/job/judge.py", line 3, in <module>\n'
            "    except openai.AuthenticationError:\nValueError: bad row 7",
            R.AUTH_ERROR,
        ),
        ("PermissionError: [Errno 13] Permission denied: '/data/out'", R.AUTH_ERROR),
        # A torch build without kernels for the GPU, and nvcc not knowing it, stay the install.
        (
            "UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            R.CONFIG_ERROR,
        ),
        ("nvcc fatal   : Unsupported gpu architecture 'compute_90'", R.CONFIG_ERROR),
        # A check of something other than the GPU's architecture.
        ("RuntimeError: Expected tensor.is_contiguous() to be true, but got false.", R.CONFIG_ERROR),
        # The Hub's API refusing the token, the storage's server error or rate limit, a download from the CDN.
        (
            "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: https://huggingface.co/api/repos/create",
            R.HUB_ERROR,
        ),
        (f"requests.exceptions.HTTPError: 500 Server Error: Internal Server Error for url: {_STORAGE}", R.HUB_ERROR),
        (f"requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: {_STORAGE}", R.HUB_ERROR),
        (
            "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: https://cdn-lfs.huggingface.co/repos/aa/bb/cc",
            R.HUB_ERROR,
        ),
    ],
)
def test_round_16_classes_stay_narrow(log: str, not_expected: R) -> None:
    assert explain(log).reason is not not_expected


def test_an_exception_reported_within_a_line_is_read_as_raised() -> None:
    from jobtrail.outcomes.tracebacks import reported

    found = reported(
        ["loading", "The model could not be loaded. The error was ValueError('Unsupported format: x').", "bye"]
    )
    assert found is not None and (found.type_name, found.lines, found.index) == (
        "ValueError",
        ("ValueError: Unsupported format: x",),
        1,
    )
    keyed = reported(["failed with KeyError('input_ids')"])
    assert keyed is not None and keyed.lines == ("KeyError: 'input_ids'",)  # str(KeyError) keeps the key's quotes
    assert reported(['    raise ValueError("unsupported")', "plain line"]) is None
