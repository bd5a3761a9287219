"""Words that mean one failure whatever library or runtime prints them. Pure.

`families` and `libraries` hold each library's own sentence for a failure; fresh logs keep bringing runtimes and
libraries no catalogue names (a Metal backend, Ray's memory monitor, a trainer's own refusal), which still say what
happened in the common words of their trade. These are those vocabulary classes:

- memory exhausted, in any runtime's words (a GPU backend's, a C++ allocator's, a memory monitor's, an OS's), and Ray's
  worker death that names the OOM killer first of its possible causes (read as oom, saying it is Ray's guess);
- a client waiting for a server the job is set up to use that never came up;
- bytes that do not decode as the data's format;
- a library refusing what it was asked (`REFUSALS`, read on an exception's own message only): a Hub token or API key
  that is missing, a package to install, a setting it does not allow ("is not compatible with", "not supported",
  "must be specified", "please set");
- a shell that could not run what the command line named, and a command-line parser refusing its arguments;
- access to a gated repo not granted, in any tool's words;
- a model, adapter or checkpoint file that is not at the path the job was given;
- a reward function missing a parameter that the trainer fills from the dataset's columns, and a list where the code
  reads a record;
- weights that do not fit the model (a vocabulary grown by added tokens among them), a model config without a
  field the code reads, and model files that are not files of their format (a Git LFS pointer);
- a config that does not match what the code reads, in a config system's words (OmegaConf, Hydra, yacs, jsonargparse,
  gin, draccus, HfArgumentParser);
- a loss or its gradients gone NaN/inf in a framework's or a script's own sentence, and fp16's loss scale collapsed to
  nothing;
- a collective broken by a peer that went away or the network (read last: every rank says it when any rank dies);
- lines that say a job is uploading its results (a server's failure then is the push's), or exporting a trained model
  for them.
"""

from __future__ import annotations

import re

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.signature import Signature, sig

# Memory ran out, said by a runtime rather than by torch's allocator (which `families` and `causes` read).
MEMORY = sig(
    R.OOM,
    "The job ran out of memory (GPU or host memory, as the runtime reports it): use less (a smaller batch or "
    "sequence length, fewer parallel workers, quantization) or a machine with more.",
    r"(?i:\binsufficient (?:GPU |device |system |host |unified |shared )?memory\b)",  # Metal, MLX, llama.cpp, shm
    r"ErrorOutOf(?:Device|Host)?Memory|\bERROR_OUT_OF_(?:DEVICE_|HOST_)?MEMORY\b",  # Metal, Vulkan, CUDA driver API
    r"\bstd::bad_alloc\b",  # C++: an allocation the process could not get
    r"(?i:\bkilled by (?:SIGKILL by )?(?:the )?OOM[ -]?killer)",
    r"(?i:\bkilled due to low memory\b)",  # a memory monitor's other words for it (`exits` reads the usual ones)
    r"The paging file is too small for this operation to complete",  # Windows: RAM plus page file exhausted
    r"\bResourceExhaustedError\b|\bRESOURCE_EXHAUSTED\b.*(?i:memory|allocat)|OOM when allocating tensor",  # TF, XLA
    r"(?i:\b(?:MPS|XPU|NPU|HIP|TPU|GPU|Metal) (?:backend )?out of memory\b)",
    r"(?i:\bnot enough (?:GPU |device |system |host )?(?:memory|RAM) (?:to|for|available)\b)",
    # XLA on TPU: a program whose buffers do not fit the chip's HBM; and the TPU runtime's abort when a step's
    # allocation fails on the device (its queue closed under the step, as mesh-tensorflow's maintainers read it).
    r"(?i:\bRan out of memory in memory space \w+)|\bAttempting to reserve \S+ at the bottom of memory\b",
    r"\bBad hardware status: Queue is closed\b",
)

# Ray's account of a worker that died without a word of its own: three possible causes, the OOM killer first. Memory is
# what the threads behind it most often found (read as oom), but Ray says it may be, not that it was: the message says
# so, and how to tell.
RAY_WORKER_DIED = sig(
    R.OOM,
    "A Ray worker died without saying why. Ray lists three possible causes: the OOM killer (high memory use), "
    "`ray stop --force`, or a crash (SIGSEGV); memory is the usual one, so it reads as oom. Check the node's memory "
    "when it died (dmesg, Ray's memory monitor in raylet.out) and lower what the workers hold (smaller batches, a "
    "lower gpu_memory_utilization); if memory was not high, the worker crashed, and its own log (`ray logs worker-*`) "
    "says where.",
    r"\bThere are some potential root causes\. \(1\) The process is killed by SIGKILL by OOM killer",
)

# A notebook's kernel (or a runtime's worker) dying and restarting with no traceback, after the allocator warned of a
# huge allocation: the host's RAM ran out and the kernel was killed (Colab, Jupyter, Kaggle). Neither alone decides:
# the warning is also printed by runs that fit, and a kernel dies for other reasons too (`classify` wants both).
KERNEL_DIED = re.compile(
    r"(?i)\bKernelRestarter: restarting kernel\b|\bkernel (?:appears to have )?died\b|\bKernel Restarting\b"
    r"|\bkernel \S+ died unexpectedly\b|\bYour session crashed\b|\bruntime (?:has )?(?:crashed|restarted)\b"
)
LARGE_ALLOCATION = re.compile(
    r"\btcmalloc: large alloc \d+ bytes|\bAllocation of \d+ exceeds \d+% of (?:free )?system memory\b"
    r"|(?i:\bjemalloc\b.*\bout of memory\b)"
)

# The server answering how often, not what: HTTP 429 (a rate limit), whoever asks (the Hub's whoami, a download, an
# API), and whatever a tool then makes of it (one reports a throttled token check as an invalid token). A retry later
# gets through. Where the number is an HTTP status: next to the words of a request or a response, not a count.
RATE_LIMITED = sig(
    R.INFRA_TRANSIENT,
    "The server rate-limited the job (HTTP 429 Too Many Requests): wait and retry, fewer requests at once (a shared "
    "IP or token asks too often); what the tool says after it (an invalid token, a failed download) follows from it.",
    r"(?i:\bToo Many Requests\b|\brate[ -]?limit(?:ed|ing)?\b.{0,40}\b(?:exceeded|reached|hit)\b"
    r"|\b(?:rate[ -]limited|RateLimitError|RateLimitExceeded)\b)",
    r"(?i:\b(?:HTTP(?:/[\d.]+)?|status(?: code)?|response(?: code)?|(?:error|return) code)[\s:=(]{1,3}429\b(?![\d.,]))",
    # a request that failed, its status last on the line (`Failed to request /api/whoami-v2 - 429`)
    r"(?i:\brequests?\b.{0,80}[\s:=(-]429\W{0,3}$)",
    r"\b429\b(?: Client Error| Too Many)",
)

# A Hub address whose repo id is a value left unset (`None`, `null`, `undefined`, empty): a path or repo argument the
# job never got, so the Hub answers 401/404 for a repo nobody named. The argument is wrong, not the token.
UNSET_REPO = sig(
    R.CONFIG_ERROR,
    "A model, tokenizer or dataset argument was left unset: the Hub was asked for a repo named `None` (or an empty "
    "name). Pass the path or repo id the job needs (a tokenizer path, a checkpoint to load).",
    r"huggingface\.co/(?:api/)?(?:(?:models|datasets|spaces)/)?(?:None|null|undefined|nan|NaN)?/(?:resolve|tree|blob|raw"
    r"|revision)/",
    r"\bRepo id must be in the form '[^']+' or '[^']+': '(?:None|null|undefined|)'",
)

# A client waiting for a server the job is set up to use (an inference or generation server, a reward model's endpoint)
# that never came up, retry after retry, or giving up on it: TRL's vLLM client (`Server is not up yet. Retrying in 2.0
# seconds...`, then `can't be reached ... Make sure the server is running`) and the same words of other clients. The
# server was not started, or the job looks for it elsewhere: its setup, which a retry of the same job repeats. Not a
# server still loading (`Waiting for shard to be ready`), nor a connection that dropped once it was up.
SERVER_NOT_UP = sig(
    R.CONFIG_ERROR,
    "The job waited for a server it is set up to use (an inference or generation server, a reward model's endpoint), "
    "and the server never answered: start it before the job (TRL's GRPO with use_vllm in server mode needs `trl "
    "vllm-serve` running), give the job its host and port, or run generation in-process (vllm_mode='colocate').",
    r"(?i:\b(?:server|service|endpoint)\b[^.;!\n]{0,40}?\b(?:is not|isn't|not|has not|hasn't) "
    r"(?:up|ready|running|started|reachable|available|come up)(?: yet)?\b[^\n]{0,40}?\bretry(?:ing)?\b)",
    r"(?i:\bserver can(?:'t|not) be reached at \S+ after \d+ seconds\b|\bmake sure the (?:\w+ )?server is (?:running"
    r"|started|up)\b)",
)

# A data item's media file that its reader cannot decode or find (a corrupt or mislabelled WAV, an image saved under
# another format's name, a video without a stream): the dataset holds a bad item. Each reader's words: libsndfile
# (soundfile, librosa), audioread, torchaudio and ffmpeg/av, PIL, OpenCV (an imread that returned nothing), decord,
# torchvision's decoder.
MEDIA = sig(
    R.BAD_INPUT,
    "A media file of the dataset (an audio clip, an image, a video) cannot be read: it is corrupt, empty, or not the "
    "format its name says. Find it (the message names it or the sample's index), then fix, convert or drop it.",
    r"\bLibsndfileError\b|\bError opening '[^']+': (?:File contains data in an unknown format|Format not recognised"
    r"|System error|Error in WAV file|Malformed|Unspecified internal error)",
    r"\bNoBackendError\b",  # audioread (librosa's fallback): no decoder can read the file
    r"\bFailed to open the input \S+|\bError (?:opening|loading) audio file\b|\bFailed to load audio\b",
    r"\bInvalid data found when processing input\b|\bmoov atom not found\b|\bav\.error\.InvalidDataError\b",
    r"\bUnidentifiedImageError\b|\bbroken data stream when reading image file\b|\bDecompressionBombError\b",
    r"\(-215:Assertion failed\) !_?src\.empty\(\)|\bcan't open/read file: check file path/integrity\b",
    r"\bDECORDError\b|\bcannot find video stream\b",
    r"\bUnsupported image file\. Only jpeg, png",
)

# The data reached the writer or trainer with no rows at all (a wrong format, path or split, or filters that dropped
# every sample), in a data library's or trainer's words: datasets' writer asking for "at least one example" (a split of
# 0 examples), an index into a dataset of size 0, a dataset, split or file said to be empty or to hold no samples. Its
# words ("please pass `features`") would otherwise read as a refused setting.
EMPTY_DATA = sig(
    R.BAD_INPUT,
    "The dataset has no examples (a file in another format than the loader expects, a wrong path or split, or filters "
    "that dropped every sample): check the data's format against what the loader reads, its path and split.",
    r"(?i:\bat least one (?:example|sample|row|record)\b.{0,40}\bwhen writing\b)",
    r"(?i:\bout of bounds for (?:dataset of )?size 0\b|\bIndex \d+ out of range for dataset of size 0\b)",
    r"(?i:\b(?:train(?:ing)?|eval(?:uation)?|validation|test)?[ _-]?(?:dataset|data ?set|split|data|samples|examples)\b"
    r"(?: after \w+(?: \w+)?)? (?:is|was|are|were|became) empty\b)",
    r"(?i:\b(?:no|zero|0) (?:valid |usable |training |train )?(?:examples|samples|rows|records|data points)\b"
    r" (?:were |was )?(?:found|left|remain(?:ing|ed)?|loaded|generated|available)\b)",
    r"(?i:\b(?:contains|has|have|yielded|produced|got) (?:no|zero|0) (?:valid )?(?:examples|samples|rows|records)\b)",
    r"(?i:\bcorresponds to no data\b)",  # datasets' split instruction selecting nothing
)

# A converter, loader or server refusing a model's architecture (or model type) it has no code for: ollama, llama.cpp,
# vLLM's GGUF loader, TGI, mlx-lm, exllama, AutoAWQ/AutoGPTQ. The model named is one the tool does not run; any line, in
# any language around it. (Where a tool's own words say the install is too old for it, `families` reads that first.)
ARCHITECTURE = sig(
    R.CONFIG_ERROR,
    "The tool does not support this model's architecture (or model type): use a model it supports, another tool (or "
    "a release of it that added the architecture), or convert the model another way.",
    r"(?i:\bunsupported (?:model )?(?:architecture|arch|model[ _]type)s?\b)",
    r"(?i:\b(?:architecture|arch|model[ _]type)s?\b[^.;]{0,60}\b(?:(?:is|are) not|isn't|aren't|not) "
    r"(?:yet |currently )?(?:supported|implemented)\b)",
    r"(?i:\bunknown (?:model )?architecture\b)",
    r"(?i:\b\w+ isn't supported yet\b)",  # AutoAWQ/AutoGPTQ: the model type has no quantization code
)

# Saving weights in a format that refuses tensors sharing memory (tied embeddings, a merge's aliases) or not contiguous:
# safetensors' own refusal and transformers' words for it. The save's settings decide (save_model, cloning the tensors,
# safe_serialization=False), not the weights.
SHARED_TENSORS = sig(
    R.CONFIG_ERROR,
    "Saving refused tensors that share memory (tied weights) or are not contiguous: save with safetensors' "
    "`save_model` (or clone the tensors, e.g. mergekit's --clone-tensors), untie them, or save without safetensors.",
    r"\bSome tensors share memory, this will lead to duplicate memory on disk\b",
    r"\bThe weights trying to be saved contained shared tensors\b",
    r"\bfound no suitable name to keep for saving amongst\b",
    r"\bYou are trying to save a non contiguous tensor\b",
)

# A KeyError whose key is a device, precision or hardware name (or a sentence about one): a table of settings has no
# entry for the machine or precision given (litgpt's flop counts, a dtype map, an attention implementation's registry),
# not a data record without a column.
SETTING_KEY = sig(
    R.CONFIG_ERROR,
    "A table of settings has no entry for the device, precision or implementation given (a GPU it does not know, a "
    "precision the GPU lacks): choose a supported precision or setting for this hardware.",
    r"\bKeyError: ['\"](?i:(?:torch\.)?(?:bf16|fp16|fp32|fp8\w*|float8\w*|fp4|tf32|bfloat16"
    r"|float16|float32|half|nf4|int8|int4|(?:bf)?16-(?:mixed|true)|32-true|cuda(?::\d+)?|cpu|mps|xla|tpu|npu|xpu|hpu|sdpa|eager|flash_attention_[23]))['\"]",
    r"\bKeyError: ['\"][^'\"]*\b(?i:precision|dtype|device|hardware|accelerator)\b[^'\"]*['\"]",
    # A tensor type by its file format's name (safetensors' `I8`, `F8_E4M3`; GGML's `Q4_K`) or torch's: a converter's
    # table of the types it writes has none for this checkpoint's (a fine-tuned or quantized model it does not handle).
    r"\bKeyError: ['\"](?:BOOL|[UI](?:8|16|32|64)|B?F(?:16|32|64)|F8_E[45]M[23]|I?Q\d_\w+|torch\.\w+)['\"]",
    r"\bKeyError: torch\.(?:u?int|float|bfloat|complex|bool)\w*\b",  # a torch.dtype key, printed without quotes
)

# A KeyError whose key is a field of a model's config (Hugging Face's names and GPT-2's/Meta's short ones): the code
# reads the config of an architecture it supports, and this model's has no such field (a converter or loader taking an
# architecture it does not support as another, or an incomplete config), not a data record without a column.
MODEL_CONFIG_KEY = sig(
    R.CONFIG_ERROR,
    "The model's config has no field the code reads: the tool or script does not support this architecture (it reads "
    "it as another one) or the config is incomplete. Use a tool (or release) that supports this model, or its full "
    "config.json.",
    r"\bKeyError: ['\"](?:(?:rms_|layer_)?norm_eps(?:ilon)?|layer_norm_epsilon|hidden_(?:size|dim)|d_model|n_embd"
    r"|num_(?:attention|key_value|kv)_heads|n_(?:kv_)?heads?|num_(?:hidden_)?layers|n_layers?|intermediate_size"
    r"|ffn_(?:hidden_size|dim)|(?:padded_)?vocab_size|n_vocab|max_position_embeddings|n_positions|n_ctx|seq_length"
    r"|rope_(?:theta|scaling)|rotary_(?:emb_base|dim|pct)|head_dim|kv_channels|multi_query_group_num"
    r"|tie_word_embeddings|num_(?:local_)?experts(?:_per_tok)?|sliding_window|(?:text|vision)_config|architectures)['\"]",
    r"\bKeyError: ['\"]could not find any of: \[",  # llama.cpp's converter looking a field up by its several names
)

# Embeddings (or an LM head) whose vocabulary sizes differ by a few added tokens (32000, 32002), met in the arithmetic
# of a merge or a delta: an adapter or fine-tune trained with tokens added to the base's vocabulary. torch's words for
# two tensors that do not broadcast, read only where both sizes are vocabulary-sized (5 digits or more) and agree in
# their leading digits; a loader's own wording for it (`size mismatch for ...`) is in `families`.
VOCABULARY = sig(
    R.CONFIG_ERROR,
    "The weights' vocabulary sizes differ (a fine-tune or adapter trained with added tokens, merged into or loaded "
    "onto the base's smaller vocabulary): resize the base model's embeddings to the tokenizer the fine-tune used "
    "(`resize_token_embeddings(len(tokenizer))`) before merging, or use the matching tokenizer.",
    r"\bThe size of tensor a \((?P<lead>\d{2,3})\d{3}\) must match the size of tensor b \((?P=lead)\d{3}\)",
    r"(?i:\bvocab(?:ulary)?[ _]size(?:s)? (?:mismatch|do(?:es)? not match)\b)",
)

# A tokenizer (or a text function) given a value of the data that is no text: an integer label, a NaN of an empty cell,
# a list where a string was expected. The data's values are of another type than the column's use.
NOT_TEXT = sig(
    R.BAD_INPUT,
    "A tokenizer was given a data value that is not text (an integer label, a NaN from an empty cell, a nested list): "
    "convert the column to strings (or map labels to their names), and drop or fill empty rows.",
    r"\btext input must (?:be )?of type `?str`?",
    r"\bTextEncodeInput must be Union\b|\bTextInputSequence must be str\b",
    r"\bargument '\w+': '(?:int|float|NoneType|list)' object cannot be converted to 'PyString'",
    r"\bInput \S+ is not valid\. Should be a string, a list/tuple of strings or a list/tuple of integers\b",
)


# Bytes that are not the text or table format the data is read as.
UNDECODABLE = sig(
    R.BAD_INPUT,
    "A data file could not be decoded (bytes that are not UTF-8 text, or rows the parser cannot split): save it as "
    "UTF-8 (or pass its encoding to the loader), and check its rows.",
    r"\bUnicodeDecodeError\b",
    r"codec can't decode byte",
    r"Error tokenizing data\. C error",  # pandas' CSV parser: a row with more fields than the header
    r"\bEmptyDataError\b",
    r"field larger than field limit",  # the csv module
)

# A shell that could not run what the command line named: the script's path (Python's own words for a script that is
# not there), or an option run as a command of its own, which is a line continuation (`\`) missing before it.
COMMAND = sig(
    R.CONFIG_ERROR,
    "The command line names something that is not there: a script path that does not exist, or an option the shell "
    "ran as a command of its own (a line continuation `\\` missing at the end of the line before). Fix the command.",
    r"can't open file '[^']+': \[Errno 2\] No such file or directory",
    r"^\S+: (?:line \d+: )?-{1,2}[\w.-]+: command not found",
)
# A YAML config that does not parse (the trainers' config files are YAML: axolotl, LLaMA-Factory, torchtune).
YAML = sig(
    R.CONFIG_ERROR,
    "The YAML config does not parse (indentation, a missing colon, a tab): fix the file at the line and column named.",
    r"\byaml\.(?:scanner\.ScannerError|parser\.ParserError|constructor\.ConstructorError)\b",
    r"^(?:ScannerError|ParserError): (?:while scanning|while parsing|mapping values are not allowed)",
)

# A command-line parser's report of a command line it rejects, whatever the parser: argparse (`prog: error: ...`, or
# `error: ...` alone as jsonargparse prints it), click and typer (`Error: No such command 'x'.`, typer in a box), Fire,
# absl flags, Hydra's overrides, HfArgumentParser. A subcommand or option the installed program does not have is the
# same rejection: the command was written for another release of the program, or another program owns its name on PATH.
CLI = sig(
    R.CONFIG_ERROR,
    "The command line was rejected (a subcommand or option the program does not have, a value outside its choices, "
    "a required argument missing): fix the arguments; the usage line lists what the program accepts. A command copied "
    "from documentation of another release needs that release, and `which <program>` shows which one is on PATH.",
    r"^(?:[^:]{1,80}: )?error: (?:argument [^:]+: (?:invalid |expected |not allowed |ignored )"
    r"|(?i:unrecognized) arguments: |the following arguments are required: |one of the arguments .* is required"
    r"|ambiguous option: )",
    r"(?:^Error: |^\W{0,3}│\s*)(?i:No such (?:command|option|subcommand)|Missing (?:argument|option|parameter)"
    r"|Invalid value for|Got unexpected extra arguments?"
    r"|Option '[^']+' (?:requires an argument|does not take a value))",
    r"^ERROR: Could not consume arg",  # Fire
    r"\bFlags parsing error: Unknown command line flag",  # absl
    r"\bCould not override '[\w.]+'",  # Hydra
    r"Some specified arguments are not used by the HfArgumentParser",
)

# A gated repo (a model or dataset whose owners grant access one account at a time) that this account may not read yet:
# the Hub's own words, and a tool's (torchtune's `tune download`, a trainer's loader) that wraps the Hub's 403 in its
# own sentence. The account must ask for access (and be granted it), then use a token of that account.
GATED = sig(
    R.AUTH_ERROR,
    "The model or dataset is gated and this account has no access to it yet: request access on its Hub page (and wait "
    "for the grant), then log in with a token of that account (`hf auth login`, HF_TOKEN).",
    r"\bGatedRepoError\b|Cannot access gated repo|\bis a gated (?:dataset|model|repo(?:sitory)?) on the Hub\b",
    r"(?i:\b(?:trying to|cannot|can't|could not|couldn't|unable to|not allowed to|no permission to) access "
    r"(?:a |the |this )?gated (?:repo(?:sitory)?|model|dataset)\b)",
    r"\bAccess to \S+ \S+ is restricted\b",
    r"(?i:\byour request to access (?:this |the )?(?:model|repo(?:sitory)?|dataset)\b.{0,80}\b(?:is awaiting|is pending"
    r"|has been rejected|was rejected)\b)",
    r"(?i:\byou need to (?:agree to share your contact information|accept the (?:conditions|license|terms)) to access "
    r"(?:this|the) (?:model|repo(?:sitory)?|dataset)\b)",
)

# A file of a model, adapter or checkpoint (by its format's extension, or a weights or tokenizer file's usual name) that
# is not at the path the job was given: a path relative to another working directory, a checkpoint never saved, a
# folder without the files. Python's, a C/C++ loader's and a shell's words for ENOENT, the path before or after them.
# A data file or a row's media file is the data's (`causes`), not this.
_MODEL_FILE = (
    r"(?:[^'\"\s/\\]*\.(?:safetensors|pt|pth|ckpt|gguf|ggml|h5|hdf5|msgpack|onnx|tflite|keras|pdparams)"
    r"|[^'\"\s/\\]*(?i:model|projector|adapter|weights?|checkpoint|ckpt|optimizer|lora)[^'\"\s/\\]*\.(?:bin|pkl|pickle)"
    r"|(?:adapter_|generation_|tokenizer_|preprocessor_)?config\.json|tokenizer\.(?:json|model)|vocab\.(?:json|txt)"
    r"|merges\.txt|special_tokens_map\.json)"
)
MODEL_FILE = sig(
    R.CONFIG_ERROR,
    "A model, adapter or checkpoint file the job was told to load is not at that path (a path relative to another "
    "working directory, a checkpoint never saved, a folder without the file): check the path argument (an absolute "
    "path avoids the working directory) and that the file was downloaded or saved there.",
    rf"No such file or directory:? ['\"]?(?:[^'\"\n]*[\\/])?{_MODEL_FILE}['\"]?(?![\w.])",
    rf"(?<![\w.]){_MODEL_FILE}['\"]?\)?:? ['\"]?No such file or directory\b",
)

# A reward function of an RL trainer (TRL's GRPO and RLOO, ms-swift's, open-r1's) called with each of the dataset's
# columns as a keyword argument, missing one of its parameters: no column of that name reached it (the dataset lacks it,
# preprocessing dropped it, or the parameter is named otherwise than the column). The batch lacks a field its consumer
# reads, which is the data's schema, as a model given no labels is. Not what the trainer passes itself (the prompts, the
# completions, its state and logging hooks, as preflight's reward-file check lists TRL's), nor a model or tokenizer:
# those are a call of another API.
_NOT_A_COLUMN = (
    r"self|model|tokenizer|processor|trainer|args|config|prompts?|completions?|completion_ids|trainer_state|log_extra"
    r"|log_metric"
)
_REWARD_MISSING = rf" missing \d+ required (?:positional|keyword-only) arguments?: '(?!(?:{_NOT_A_COLUMN})')"
REWARD_COLUMN = sig(
    R.BAD_INPUT,
    "A reward function takes a parameter that the trainer fills from the dataset's columns, and no column of that name "
    "reached it (the name is in the message): add the column to the dataset (or keep preprocessing from removing it), "
    "or rename the reward's parameter to the column the dataset has (`solution`, `answer`...).",
    rf"\b(?:\w+_)?rewards?(?:_\w+)?\(\){_REWARD_MISSING}",
    rf"\b\w*Reward\w*\.__call__\(\){_REWARD_MISSING}",
)

# A list asked for a mapping's keys or fields: the code reads a record (a row, a conversation, a message) and was given
# a bare list, as JSON data in another shape gives it (conversations as lists of turns where rows of named fields were
# expected). A string or a tuple asked the same is as often a setting or a model's output: not read here.
ROW_SHAPE = sig(
    R.BAD_INPUT,
    "The data has another shape than the code reads: a row or a field of it is a list where a record with named "
    "fields was expected (a conversation given as a bare list of turns, not a row with a `conversations` or `messages` "
    "field): reshape the data to the format the trainer or notebook documents.",
    r"'list' object has no attribute '(?:keys|items|values|get)'",
)

# Weights that do not fit the model they are loaded into, in any framework's words (torch's strict load, MLX's
# load_weights, accelerate placing a tensor, Keras): a checkpoint of another architecture or size, or a script or
# converter that does not support this model.
WEIGHTS = sig(
    R.CONFIG_ERROR,
    "The weights do not fit the model they are loaded into (parameters it does not have, missing ones, or other "
    "shapes): a checkpoint of another architecture or size, or a script or converter that does not support this "
    "model. Use the matching model and config, or a tool that supports this architecture.",
    r"\b(?:Missing|Unexpected) key\(s\) in state_dict\b",
    r"\bReceived parameters not in model\b|\bMissing parameters: |but received shape \([\d, ]*\) for parameter\b",
    r"Trying to set a tensor of shape \S+ in \S+ \(which has shape",
    r"\bLayer count mismatch when loading weights\b|load a weight file containing \d+ layers into a model with",
)

# A model or tokenizer file that is not what its name says: a Git LFS pointer (a clone without git-lfs: the file is a
# few lines of text starting `version https://git-lfs`), an HTML error page, a download cut short. Each reader fails in
# its own words on the first bytes it checks (safetensors' header length, pickle's first opcode, zip's directory,
# sentencepiece's protobuf, HDF5's signature, GGUF's magic). The job's input is broken, not an argument.
CORRUPT_FILE = sig(
    R.BAD_INPUT,
    "A model or tokenizer file is not a complete file of its format (a Git LFS pointer from a clone without git-lfs, "
    "an error page, or a partial download): download it again (`git lfs install && git lfs pull`, or from the Hub) "
    "and check its size.",
    r"Error while deserializing header: (?:HeaderTooLarge|HeaderTooSmall|MetadataIncompleteBuffer"
    r"|InvalidHeader\w*|header too large)",
    r"\bversion https://git-lfs\.github\.com/spec/v1\b",
    r"\binvalid load key, '[v<]'",  # pickle reading `version ...` (a pointer) or `<html` (a page)
    r"PytorchStreamReader failed reading zip archive",
    r"sentencepiece_processor\.cc\(\d+\)\s*\[model_proto->ParseFromArray",
    r"\(file signature not found\)",  # HDF5
    r"invalid magic characters:? '?vers",  # a GGUF reader given a pointer's `version ...`
    r"Unable to load weights from pytorch checkpoint file",  # transformers' wrapping of the reader's failure
)

# Lines that say a job is sending its results somewhere (the Hub, a model registry, a bucket): a server's failure
# after training finished, while these are under way, is the push failing, not the training.
UPLOADING = re.compile(
    r"(?i)\b(?:uploading|pushing|committing|upload(?:ing)? (?:to|of|the|final|model|checkpoint|weights|artifacts?)"
    r"|push(?:ing)? to|push_to_hub|upload_(?:folder|file|large_folder)|create_commit)\b"
)

# Lines that say a trained model is being exported for its upload (a trainer's conversion to GGUF, a merge of the
# adapter into 16-bit weights): the model exists, and a failure then is the export's, not the training's.
EXPORTING = re.compile(
    r"(?i)\bGGUF conversion\b|\bconver(?:t|ting|sion)\b.{0,40}\bto GGUF\b"
    r"|\b(?:save_pretrained|push_to_hub)_(?:gguf|merged)\b"
    r"|\bmerging (?:\w+ and )?(?:LoRA|adapters?|PEFT)\w* (?:weights )?(?:in)?to (?:16|32)-?bit\b"
)

# A config that does not match the code reading it: a key the code reads that the config lacks, one the config has that
# the schema does not, a config file or group that is not there. Each config system's words (OmegaConf's struct mode,
# Hydra's composition, yacs/detectron2's CfgNode, jsonargparse's check, gin, draccus, HfArgumentParser's leftovers).
# `causes` also reads any exception these packages raise as this.
CONFIG_KEYS = sig(
    R.CONFIG_ERROR,
    "The config does not match what the code reads (a key it needs is missing, a key it has is unknown to the schema, "
    "or a config file or group is not found): add or rename the key the message names, or use a config written for "
    "this version of the code.",
    r"\bKey '[^']+' (?:is )?not in (?:struct|'[\w.]+')",  # OmegaConf: struct mode, a structured config's class
    r"\bMissing mandatory value\b",  # OmegaConf's `???`
    r"\bNon-existent config key\b",  # yacs (detectron2, maskrcnn-benchmark, fvcore)
    r"\bCannot find primary config\b|\bIn '[\w/.-]+': Could not find '[\w/.-]+'",  # Hydra
    r"\bConfiguration check failed :: ",  # jsonargparse (LightningCLI)
    r"\bNo configurable matching '[^']+'",  # gin
    r"\bThe fields? `[^`]+` (?:is|are) not valid for \w+",  # draccus
    r"\bSome keys are not used by the HfArgumentParser\b",  # a dict or YAML file parsed into its dataclasses
)

# A loss (or its gradients) gone non-finite, in the sentence a framework stops or warns with: detectron2's and mmcv's
# checks, Lightning's finite check and its early stopping on a NaN metric, fairseq's and torch's on the gradients,
# Keras' TerminateOnNaN, JAX's debug_nans, TensorFlow's check_numerics, a summary writer refusing a NaN scalar, and a
# training script's own guard in any order of its words (`Loss is not finite. Terminate training.`, `non-finite loss
# encountered`, `NaN loss detected at step 120`; "not finite" after the loss needs no verb, the way scripts misspell
# one). Not advice in the same words (`if the loss is nan, ...`), nor fp16's loss scale (no loss).
NONFINITE = sig(
    R.DIVERGED,
    "The loss (or the gradients) became NaN or infinite and training stopped: lower the learning rate, clip gradients, "
    "train in bf16 or fp32 rather than fp16, and check the data for empty or extreme samples.",
    r"(?i:(?<!\bif )(?<!\bif the )(?<!\bwhen )(?<!\bwhen the )(?<!\bwhether )(?<!\bwhether the )"
    r"\b(?:the )?(?:total |training |train |model )?loss(?:es)?\b(?! ?scal)[^.;!\n]{0,40}?"
    r"(?:\b(?:became|become|has become|is|was|went|turned|are|were)\s+(?:either\s+)?(?:tensor\()?"
    r"(?:infinite|inf|nan|non-?finite|not finite)|\b(?:not |non-?)finite)\b)",
    r"(?i:(?<!\bif )(?<!\bavoid )\b(?:non-?finite|nan|inf(?:inite)?) (?:total |training |train )?loss(?:es)? "
    r"(?:detected|encountered|found|occurred|at (?:step|iteration|iter|epoch|batch))\b)",
    r"(?i:\bgrad(?:ient)?s?(?: norm)? (?:are|is|was|were|became) (?:nan|inf)(?:/(?:nan|inf)| or (?:nan|inf))?\b)",
    r"\bis non-finite, so it cannot be clipped\b",
    r"\bInvalid loss,? terminating training\b",
    r"\bMonitored metric \S+ = (?:nan|-?inf) is not finite\b",
    r"\binvalid value \((?:nan|inf)\) encountered in\b",
    r"\bTensor had (?:NaN|Inf) values\b",
    r"\bNaN or Inf found in input tensor\b",
)

# fp16's dynamic loss scale, halved at each overflow, reaching zero (or a denormal, or the scaler's floor): every step
# overflows and is skipped, so nothing trains any more. DeepSpeed's and apex's `reducing (loss scale) to 0`, fairseq's
# and flashlight's `Minimum loss scale reached`, a logged `loss scale: 0.0` (Megatron, torch.amp's scale as trainers log
# it).
LOSS_SCALE_COLLAPSED = (
    r"(?i:\bminimum loss scale reached\b|\bloss scale (?:is )?(?:already )?at (?:its |the )?minimum\b"
    r"|\breducing (?:loss scale |the scale )?to (?:0(?:\.0+)?(?![\d.e])|\d(?:\.\d+)?e-(?:[3-9]\d|\d{3})\b)"
    r"|\b(?:loss|grad(?:ient)?|amp)[ _-]?scal(?:e|er)(?: value)?\s*[:=]\s*0(?:\.0+)?(?![\d.e]))"
)

# The loose-line vocabulary (`families` tries it after the libraries' own sentences).
SIGNATURES: list[Signature] = [
    RATE_LIMITED,
    UNSET_REPO,
    SERVER_NOT_UP,
    RAY_WORKER_DIED,
    GATED,
    MEMORY,
    MEDIA,
    EMPTY_DATA,
    ARCHITECTURE,
    SHARED_TENSORS,
    SETTING_KEY,
    MODEL_CONFIG_KEY,
    NOT_TEXT,
    UNDECODABLE,
    COMMAND,
    CLI,
    WEIGHTS,
    MODEL_FILE,
    REWARD_COLUMN,
    ROW_SHAPE,
    VOCABULARY,
    YAML,
    CONFIG_KEYS,
    NONFINITE,
]

# A collective between processes broken because a peer went away or the network between them failed: NCCL's
# ncclRemoteError (as torch and XLA print it), JAX's coordination service losing a task, PyTorch/XLA's rendezvous over a
# closed socket, gloo's peer closing, InfiniBand completions with an error. Each rank says it when ANY rank dies, so it
# is only the reason when the log shows no other failure (`classify` reads it last, and a traceback naming it is passed
# over for another's, see `tracebacks`): then the fabric or a machine failed under the job, which a retry gets past.
PEER_LOST = sig(
    R.INFRA_TRANSIENT,
    "A collective between processes failed because a peer exited or the network between them failed (NCCL, XLA/JAX's "
    "coordination, gloo), and the log shows no other failure that made a peer exit: a fault of the fabric or of a "
    "machine; retry. If it recurs, read the other ranks' logs for the first error.",
    r"\bremote process exited or there was a network error\b|\bncclRemoteError\b",
    r"\bJAX distributed service detected fatal errors\b",
    r"\bheartbeat timeout\b.{0,80}\b(?:remote task has failed|got preempted|crashed unexpectedly)",
    r"\bFailed to meet rendezvous '[^']+': Socket closed\b",
    r"\bConnection closed by (?:remote )?peer\b",
    r"\bNET/IB ?: Got completion from peer\b.*\berror\b",
    # NCCL's socket transport losing its connection to a peer (a recv or send that failed, a dropped link): every rank
    # then waits at the collective, often with no exception at all.
    r"\bNCCL WARN (?:Net|NET/\w+) ?: (?:Call to (?:recv|send|connect)\b.*\bfailed\b|socket progress error\b)",
    r"\bNCCL WARN\b.*\bConnection (?:timed out|reset by peer|refused)\b",
)

MISSING_TOKEN = (
    "The Hub token (or the service's API key) is missing or not accepted: log in (`hf auth login`), set HF_TOKEN or "
    "pass the token argument, with write access for a push."
)
INSTALL = "A package the code needs is missing or of another version: install the package the message names."
REFUSED = (
    "A library refused the settings it was given (a combination it does not allow, a value it does not support, an "
    "argument that must be given): its message names the setting; change it."
)

# A library's refusal, by its words: tried on an exception's own message (its first line), never on loose lines, where
# the same words are advice. The first class that matches decides: a missing token, then a package, then a setting.
REFUSALS: list[Signature] = [
    sig(
        R.AUTH_ERROR,
        MISSING_TOKEN,
        r"(?i:\b(?:hf|hub|hugging ?face|api|access|auth\w*|write|read|user|bearer)[ _-]?(?:token|key)\b.{0,60}"
        r"\b(?:must be (?:specified|provided|set|given|passed)|(?:is|was) (?:required|missing|not (?:set|found|valid))"
        r"|not (?:found|provided|configured)|invalid|expired))",
        r"(?i:\btoken\b.{0,60}\b(?:must be|is|was) (?:specified|provided|required|set|given)\b.{0,40}"
        r"\b(?:hub|push|login|upload|repo))",
        r"(?i:\bno (?:api[ _-]?key|token) (?:provided|found|given|set)\b)",
        # An environment variable holding a credential, by its conventional name (`HF_TOKEN`, `OPENAI_API_KEY`).
        r"(?i:\bplease (?:set|provide|pass|export|specify)\b).{0,40}\b(?:[A-Z][A-Z0-9]*_)*(?:TOKEN|API_KEY)\b",
        r"(?i:\b(?:not|n't) (?:logged|signed) in\b)",
        r"(?i:\bplease (?:log ?in|login|authenticate)\b)",
    ),
    sig(
        R.DEPENDENCY_ERROR,
        INSTALL,
        r"(?i:\bplease (?:pip )?(?:install|upgrade|update|reinstall)\b)",
        r"\bpip install\b",
        r"(?i:\b(?:is|are) not installed\b)",
        r"(?i:\brequires? (?:the )?`?[\w.-]+`? (?:package|library)\b)",
        r"(?i:\brequires? `?[\w.-]+ ?(?:>=|==|~=)\s?\d)",
    ),
    sig(
        R.CONFIG_ERROR,
        REFUSED,
        r"(?i:\b(?:not |in)compatible with\b)",
        r"(?i:\bcan(?:'t|not) be (?:used|combined|enabled) (?:together )?with\b)",
        r"(?i:\bmutually exclusive\b)",
        r"(?i:\bnot (?:yet |currently )?supported\b)(?! between instances)",  # not Python's `'<' not supported between`
        r"(?i:\bonly supports?\b)",
        r"(?i:\b(?:must|should|has to|needs to) be (?:specified|set|provided|given|passed|one of|enabled|disabled)\b)",
        r"(?i:\bplease (?:set|specify|provide|input|pass|use|choose|select|define|add)\b)",
        r"(?i:\b(?:invalid|unknown|unrecognized|unrecognised|unsupported|illegal) (?:value|argument|option|parameter"
        r"|choice|setting|config\w*|mode|strategy)\b)",
        r"(?i:\bexpected one of\b)",
        r"(?i:\bmissing (?:a )?required (?:argument|parameter|option|field|key)\b)",
        # A value above a limit the settings name (`max_lora_rank`, `max_num_seqs`): raise the setting or the value.
        r"(?i:\b(?:greater|larger|bigger|higher|more) than (?:the )?(?:configured |allowed )?max(?:imum)?_\w+"
        r"|\bexceeds? (?:the )?(?:configured |allowed )?max(?:imum)?_\w+)",
    ),
]
