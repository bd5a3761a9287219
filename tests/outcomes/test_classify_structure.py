"""The classifier's structural pieces: exit codes, line prefixes, launcher and scheduler reports,
progress after a traceback, the chain's root, disk_full and an unrecognised log's message."""

from __future__ import annotations

import pytest

from jobtrail.models import ExitRecord, TerminationReason as R
from jobtrail.outcomes.classify import classify, explain
from jobtrail.outcomes.exits import child_exit, decode, read
from jobtrail.outcomes.lines import clean, source
from jobtrail.outcomes.retry import AttemptFacts, decide
from jobtrail.outcomes.tracebacks import last_chain
from support.benches import run_bench


def _exit(code=None, signal=None) -> ExitRecord:
    return ExitRecord(exit_code=code, signal=signal, ended_at=1.0)


@pytest.mark.parametrize(
    ("code", "signal", "decoded", "words"),
    [
        (137, None, 9, "exit 137 = killed by signal 9 (SIGKILL)"),
        (143, None, 15, "exit 143 = killed by signal 15 (SIGTERM)"),
        (-9, None, 9, "exit -9 = killed by signal 9 (SIGKILL)"),
        (247, None, 9, "exit 247 = killed by signal 9 (SIGKILL)"),  # a launcher's sys.exit(-9), as a byte
        (1, None, None, "exit 1"),
        (255, None, None, "exit 255"),  # a program's own code, not 256 - 1 (SIGHUP kills are reported as 129)
        (None, 9, 9, "killed by signal 9 (SIGKILL)"),
    ],
)
def test_exit_codes_are_decoded_in_each_convention(code, signal, decoded, words):
    status = decode(code, signal)
    assert status.signal == decoded
    assert status.words == words


def test_only_a_parents_report_of_a_childs_signal_is_relayed():
    assert decode(247).relayed and decode(-9).relayed
    assert not decode(137).relayed and not decode(None, 9).relayed and not decode(1).relayed


@pytest.mark.parametrize(
    ("raw", "cleaned", "process"),
    [
        ("[rank1]: KeyError: 'prompt'", "KeyError: 'prompt'", "[rank1]:"),
        ("[default0]:Traceback (most recent call last):", "Traceback (most recent call last):", "[default0]:"),
        (
            "(VllmWorkerProcess pid=4242) ERROR 05-01 10:00:00 multiproc_worker_utils.py:116] ValueError: boom",
            "ValueError: boom",
            "(VllmWorkerProcess pid=4242)",
        ),
        ('2024-05-01T10:00:00.123456789Z   File "/x.py", line 3, in f', '  File "/x.py", line 3, in f', None),
        ("\x1b[31mRuntimeError: red\x1b[0m", "RuntimeError: red", None),
        ("[2024-05-01 10:00:00,123] [rank0]: ValueError: x", "ValueError: x", "[rank0]:"),
        (
            "trainer-1  | OSError: [Errno 28] No space left on device",
            "OSError: [Errno 28] No space left on device",
            None,
        ),
        ("[1,3]<stderr>:RuntimeError: y", "RuntimeError: y", "[1,3]<stderr>:"),
        ("E                   RuntimeError: Dataset scripts", "RuntimeError: Dataset scripts", None),  # pytest's report
        ("`[rank15]: RuntimeError: nan`", "RuntimeError: nan", None),  # a markdown code span around a pasted line
        ("`a` and `b`", "`a` and `b`", None),
        ("E0501 10:00:00.123 glog line", "E0501 10:00:00.123 glog line", None),
        ("  3%|▎         | 12/400 [00:41<22:10,  3.43s/it]", "  3%|▎         | 12/400 [00:41<22:10,  3.43s/it]", None),
        ("> OSError: [Errno 28] No space left", "OSError: [Errno 28] No space left", None),  # a markdown quote
        (">>> import torch", ">>> import torch", None),  # Python's prompt is no quote
        ('1204.5s\t812\t  File "/kaggle/train.py", line 3', '  File "/kaggle/train.py", line 3', None),  # Kaggle
        # Two ranks writing the same exception line at once, their writes interleaved.
        ("ValueErrorValueError: : boom", "ValueError: boom", None),
        ("[rank0]: torch.OutOfMemoryErrortorch.OutOfMemoryError: : CUDA", "torch.OutOfMemoryError: CUDA", "[rank0]:"),
    ],
)
def test_line_prefixes_are_stripped_and_the_process_kept(raw, cleaned, process):
    assert clean(raw) == cleaned
    if process:
        assert source(raw) == process


def test_interleaved_ranks_are_read_as_separate_tracebacks():
    tail = [
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1, in forward',
        '[rank1]:   File "/usr/lib/python3.11/site-packages/torch/distributed/c10d.py", line 1, in all_reduce',
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[rank1]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error",
        "[rank1]: ... Connection reset by peer",
    ]
    chain = last_chain(tail)
    assert [e.name for e in chain] == ["OutOfMemoryError"]
    assert [f.function for f in chain[0].frames] == ["forward"]
    assert classify(_exit(1), None, tail).reason is R.OOM


TORCHRUN_KILLED = [
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1235 closing signal SIGTERM",
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 1234) of binary: "
    "/usr/bin/python3",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 806, in main',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -15 (pid: 1235)",
    "  traceback : Signal 15 (SIGTERM) received by PID 1235",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -9 (pid: 1234)",
    "  error_file: <N/A>",
    "  traceback : Signal 9 (SIGKILL) received by PID 1234",
    "============================================================",
]


def test_torchrun_reports_a_child_killed_so_the_machine_was_not_taken_away():
    root = child_exit(read(TORCHRUN_KILLED))
    assert root is not None and root.exit is not None and root.exit.signal == 9 and "-9" in root.line
    verdict = classify(_exit(1), None, TORCHRUN_KILLED)
    assert verdict.reason is R.OOM and "launcher lived on" in verdict.message


def test_torchrun_root_cause_with_an_exit_code_defers_to_the_workers_traceback():
    worker = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/job/train.py", line 3, in <module>',
        "[rank0]: ModuleNotFoundError: No module named 'peft'",
    ]
    summary = [line.replace("-9 (pid: 1234)", "1 (pid: 1234)") for line in TORCHRUN_KILLED if "SIGKILL" not in line]
    summary = [line.replace("failed (exitcode: -9)", "failed (exitcode: 1)") for line in summary]
    assert classify(_exit(1), None, worker + summary).reason is R.DEPENDENCY_ERROR


@pytest.mark.parametrize(
    ("tail", "code", "expected"),
    [
        # DeepSpeed's launcher: the child's -9, then its own sys.exit(-9) leaves the shell 247.
        (
            [
                "[INFO] [launch.py:316:sigkill_handler] Killing subprocess 4242",
                "[ERROR] [launch.py:322:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=0'] "
                "exits with return code = -9",
            ],
            247,
            R.OOM,
        ),
        (["some output"], 247, R.OOM),  # 247 alone: a parent passed on its child's SIGKILL
        (
            [
                "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' died with "
                "<Signals.SIGKILL: 9>."
            ],
            1,
            R.OOM,
        ),  # accelerate launch
        (["/bin/bash: line 1:    27 Killed                  python train.py"], 137, R.OOM),
        (["{'loss': 1.2, 'grad_norm': 0.4, 'learning_rate': 0.0002, 'epoch': 0.1}"], 137, R.PREEMPTED),
        (
            [
                "Traceback (most recent call last):",
                "KeyboardInterrupt",
                "slurmstepd: error: *** JOB 4242 ON gpu-01 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
            ],
            None,
            R.TIMEOUT,
        ),
        (
            ["slurmstepd: error: *** JOB 4242 ON gpu-01 CANCELLED AT 2024-04-20T09:09:37 DUE TO PREEMPTION ***"],
            1,
            R.PREEMPTED,
        ),
        (["    Last State:  Terminated", "      Reason:    OOMKilled", "      Exit Code: 137"], 137, R.OOM),
        (["The node was low on resource: ephemeral-storage."], 1, R.DISK_FULL),
        # The shell's `Killed` (bash) or job report (zsh) lands on the line of the progress bar it interrupted.
        (["Loading weights:  40%|████      | 2/5 [00:03<00:04,  1.50s/it]Killed"], None, R.OOM),
        (
            ["Tokenizing:  10%|█         | 10/100 [00:01<00:09, 9.80it/s][2]    4242 killed     python tune.py"],
            None,
            R.OOM,
        ),
        (["zsh: killed     python tune.py"], None, R.OOM),
        # torch elastic's agent names the signal it was itself sent: its terminal closed, or Ctrl-C.
        (
            ["torchrun/agent: torch.distributed.elastic.multiprocessing.api.SignalException: Process 42 got signal: 1"],
            None,
            R.PREEMPTED,
        ),
        (
            ["WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers"],
            1,
            R.CANCELLED,
        ),
        (
            ["torch.distributed.elastic.multiprocessing.api.SignalException: Process 42 got signal: 15"],
            None,
            R.PREEMPTED,
        ),
    ],
)
def test_launchers_and_schedulers_reports(tail, code, expected):
    assert explain("\n".join(tail), code).reason is expected


TRACEBACK = [
    "{'loss': 1.1, 'grad_norm': 0.3, 'learning_rate': 0.0002, 'epoch': 0.1}",
    " 11%|█         | 44/400 [02:13<17:58,  3.03s/it]",
    "Traceback (most recent call last):",
    '  File "/job/train.py", line 9, in <module>',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]


def test_a_progress_bar_redrawn_after_a_traceback_is_not_training_going_on():
    redrawn = [*TRACEBACK, " 11%|█         | 45/400 [02:16<17:58,  3.03s/it]"]
    assert classify(_exit(1), None, redrawn).reason is R.OOM
    # Another rank's bar at its start, after a traceback with no bar before it: no step either.
    early = [*TRACEBACK[2:], "  0%|          | 0/400 [00:00<?, ?it/s]"]
    assert classify(_exit(1), None, early).reason is R.OOM
    # A bar that counts well past the traceback, or a logged loss, is training that went on: handled.
    went_on = [*TRACEBACK, " 20%|██        | 80/400 [04:00<16:00,  3.00s/it]"]
    assert classify(_exit(1), None, went_on).reason is R.UNKNOWN
    logged = [*TRACEBACK, "{'loss': 1.0, 'grad_norm': 0.3, 'learning_rate': 0.0002, 'epoch': 0.2}"]
    assert classify(_exit(1), None, logged).reason is R.UNKNOWN


def test_the_chain_is_followed_to_its_root():
    tail = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/site-packages/safetensors/torch.py", line 286, in save_file',
        'OSError: [Errno 28] No space left on device: "/data/out/checkpoint-500/model.safetensors"',
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/site-packages/transformers/trainer.py", line 3000, in _save_checkpoint',
        "RuntimeError: Error while saving the checkpoint",
    ]
    verdict = classify(_exit(1), None, tail)
    assert verdict.reason is R.DISK_FULL
    assert verdict.evidence and "Errno 28" in verdict.evidence


def test_disk_full_says_which_path_and_how_much_was_needed():
    datasets = explain(
        "OSError: Not enough disk space. Needed: 3.73 GiB (download: 1.22 GiB, generated: 2.51 GiB, "
        "post-processed: Unknown size)",
        1,
    )
    assert datasets.reason is R.DISK_FULL and "3.73 GiB needed" in datasets.message
    written = explain("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/tmpx'", 1)
    assert written.reason is R.DISK_FULL and "/root/.cache/huggingface/hub/tmpx" in written.message
    pip = explain("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device", 1)
    assert pip.reason is R.DISK_FULL  # not a dependency problem: the packages were fine, the disk was not


def _attempt(n: int, reason: R) -> AttemptFacts:
    return AttemptFacts(number=n, reason=reason, config_sha256="A", last_step=10, start_step=None)


def test_disk_full_is_retried_once_by_hand_after_space_is_freed_never_automatically():
    automatic = decide([_attempt(1, R.DISK_FULL)], {}, None, automatic=True)
    assert not automatic.retry and automatic.fix and "Free space" in automatic.fix
    by_hand = decide([_attempt(1, R.DISK_FULL)], {}, None)
    assert by_hand.retry and "1 of 1" in by_hand.message
    again = decide([_attempt(1, R.DISK_FULL), _attempt(2, R.DISK_FULL)], {}, None)
    assert not again.retry and "budget for disk_full is spent" in again.message
    bigger = decide([_attempt(1, R.DISK_FULL), _attempt(2, R.DISK_FULL)], {}, {"flavor": "a100-large"}, automatic=True)
    assert bigger.retry  # another machine, another disk


@pytest.mark.parametrize(
    ("text", "code", "says"),
    [
        (
            'Traceback (most recent call last):\n  File "/job/x.py", line 1, in f\n'
            "FrobnicationError: the widget broke\n",
            1,
            ["exit 1", "FrobnicationError: the widget broke"],
        ),
        ("nothing useful\n", 134, ["exit 134 = killed by signal 6 (SIGABRT)"]),
        (
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 3) local_rank: 0 (pid: 1) of "
            "binary: x\n",
            1,
            ["exit 1", "child's exit 3"],
        ),
    ],
)
def test_an_unrecognised_log_says_what_it_saw(text, code, says):
    verdict = explain(text, code)
    assert verdict.reason is R.UNKNOWN
    for part in says:
        assert part in verdict.message, verdict.message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "ValueError: Asking to pad but the tokenizer does not have a padding token. Please select a token",
            R.CONFIG_ERROR,
        ),
        (
            "ValueError: Target modules {'q_proj'} not found in the base model. Please check the target modules",
            R.CONFIG_ERROR,
        ),
        (
            "jinja2.exceptions.TemplateError: Conversation roles must alternate user/assistant/user/assistant/...",
            R.CONFIG_ERROR,
        ),
        ("jinja2.exceptions.UndefinedError: 'dict object' has no attribute 'content'", R.BAD_INPUT),
        ("torch.distributed.DistStoreError: Socket Timeout", R.CONFIG_ERROR),
        ("OSError: [Errno 28] No space left on device", R.DISK_FULL),
        ("jinja2.exceptions.TemplateSyntaxError: unexpected '}'", R.CONFIG_ERROR),
        (
            "datasets.table.CastError: Couldn't cast\ntext: string\nto\n{'messages': ...}\n"
            "because column names don't match",
            R.BAD_INPUT,
        ),
        (
            "TypeError: TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]",
            R.BAD_INPUT,
        ),
        ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.", R.DIVERGED),
        ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", R.DIVERGED),
        (
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
            "Timeout(ms)=1800000) ran for 1800324 milliseconds before timing out.",
            R.INFRA_TRANSIENT,
        ),
        (
            "wandb.errors.UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])",
            R.AUTH_ERROR,
        ),
        (
            "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be "
            "stored in KV cache (3664).",
            R.OOM,
        ),
        ("NotImplementedError: Architecture 'FooForCausalLM' not supported!", R.CONFIG_ERROR),
        ("AttributeError: type object 'MODEL_ARCH' has no attribute 'ARCEE'", R.DEPENDENCY_ERROR),
        (
            "Exception: data did not match any variant of untagged enum ModelWrapper at line 1 column 1",
            R.DEPENDENCY_ERROR,
        ),
        ("llama_model_quantize: failed to quantize: tensor cols 2880 x 2880 are not divisible by 256", R.CONFIG_ERROR),
        # argparse rejecting a command line, whatever the program.
        ("tune.py: error: argument --dtype: invalid choice: 'fp12' (choose from 'fp16', 'bf16')", R.CONFIG_ERROR),
        ("My Tool CLI: error: unrecognized arguments: --epoch 3", R.CONFIG_ERROR),
        ("ValueError: Some specified arguments are not used by the HfArgumentParser: ['--lr', '1']", R.CONFIG_ERROR),
        # An empty dataset reaching the sampler or a split.
        ("ValueError: num_samples should be a positive integer value, but got num_samples=0", R.BAD_INPUT),
        (
            "ValueError: With n_samples=0, test_size=0.2 and train_size=None, the resulting train set will be empty",
            R.BAD_INPUT,
        ),
        # The last logged loss is NaN or inf, in a trainer's dict or a plain log line.
        ("{'loss': 3.2, 'epoch': 0.1}\n{'loss': nan, 'learning_rate': 1e-05, 'epoch': 0.2}", R.DIVERGED),
        ("iter 300: loss: inf, lr 0.001", R.DIVERGED),
    ],
)
def test_library_families_by_their_own_words(line, expected):
    assert explain(line, 1).reason is expected


def test_a_nan_loss_that_training_recovered_from_decides_nothing():
    text = "{'loss': 3.2, 'epoch': 0.1}\n{'loss': nan, 'epoch': 0.2}\n{'loss': 3.1, 'epoch': 0.3}"
    assert explain(text).reason is R.UNKNOWN


def test_a_shells_crash_report_is_a_childs_signal():
    assert [r.exit.signal for r in read(["Segmentation fault (core dumped)"]) if r.exit] == [11]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # llama.cpp's tools checking their own arguments.
        ("Error quantizing: b\"main: invalid nthread 'Q8_0' (stoi)\\n\"", R.CONFIG_ERROR),
        ("error: invalid argument: --ctx", R.CONFIG_ERROR),
        # torch's grad scaler given fp16 trainable weights (as retyped in a report, too).
        ("ValueError: Attempting to unscale FP16 gradients.", R.CONFIG_ERROR),
        ("ValueError : Attemting to unscale fp16 Gradients", R.CONFIG_ERROR),
        # PEFT: the modules named are not there (printed with or without a space), or it has no default for the model.
        ("ValueError: Target modules(['q_proj'])not found in the base model.", R.CONFIG_ERROR),
        ("ValueError: Please specify `target_modules` in `peft_config`", R.CONFIG_ERROR),
        # The driver, the CUDA runtime and native packages out of step.
        (
            "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11000).",
            R.DEPENDENCY_ERROR,
        ),
        ("RuntimeError: CUDA driver version is insufficient for CUDA runtime version", R.DEPENDENCY_ERROR),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", R.DEPENDENCY_ERROR),
        (
            "RuntimeError: merge_sort: failed to synchronize: cudaErrorIllegalAddress: an illegal memory access",
            R.DEPENDENCY_ERROR,
        ),
        ("UserWarning: The installed version of bitsandbytes was compiled without GPU support.", R.DEPENDENCY_ERROR),
        ("'NoneType' object has no attribute 'cadam32bit_grad_fp32'", R.DEPENDENCY_ERROR),
        ("RuntimeError: Failed to find C compiler. Please specify via CC environment variable.", R.DEPENDENCY_ERROR),
        # GPU memory in the CUDA runtime's words; a GPU too old for flash-attn.
        ("RuntimeError: CUDA error: out of memory", R.OOM),
        ("CUDA error: out of memorySearch for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/", R.OOM),
        ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", R.CONFIG_ERROR),
        # NCCL's own failures and the GPU's hardware: the machine, not the job.
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333, unhandled system error",
            R.INFRA_TRANSIENT,
        ),
        ("ncclInternalError: Internal check failed.", R.INFRA_TRANSIENT),
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", R.INFRA_TRANSIENT),
        # DeepSpeed's batch sizes that do not add up.
        (
            "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
            "gradient_acc_step * world_size 256 != 4 * 8 * 1",
            R.CONFIG_ERROR,
        ),
        # pyarrow reading data files, without a module prefix.
        ("ArrowInvalid: Could not convert '-0.2' with type str: tried to convert to double", R.BAD_INPUT),
        # The gradient norm NaN at the newest logged step.
        ("{'loss': 1.04, 'grad_norm': nan, 'learning_rate': 1e-08, 'epoch': 0.0}", R.DIVERGED),
    ],
)
def test_more_library_families_by_their_own_words(line, expected):
    assert explain(line, 1).reason is expected


def test_an_inf_grad_norm_is_fp16s_skipped_step_not_divergence():
    assert explain("{'loss': 1.2, 'grad_norm': inf, 'epoch': 0.1}").reason is R.UNKNOWN


@pytest.mark.parametrize(
    "line",
    [
        '== Error ==  system call for: "spades" finished abnormally, OS return value: -9',
        "CompletedProcess(returncode=-9)",
    ],
)
def test_any_parents_negative_return_value_is_a_child_killed(line):
    assert explain(line).reason is R.OOM


def test_a_slurm_requeue_is_a_preemption():
    line = "slurmstepd: error: *** JOB 608 ON node1 CANCELLED AT 2022-08-12T02:06:12 DUE TO JOB REQUEUE ***"
    assert explain(line, 1).reason is R.PREEMPTED


NCCL_WAITED = (
    "Running tokenizer on dataset:   9%|█         | 280000/2969526 [29:55<4:48:08, 155.57 examples/s]"
    "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800328 milliseconds before timing out."
)


def test_a_collective_that_waited_for_data_preparation_is_a_timeout():
    verdict = explain(NCCL_WAITED, 1)
    assert verdict.reason is R.TIMEOUT and "30 minutes, the default" in verdict.message


def test_a_collective_timeout_during_training_stays_a_transient_failure():
    assert explain("{'loss': 1.0, 'epoch': 0.1}\n" + NCCL_WAITED, 1).reason is R.INFRA_TRANSIENT


def _raised(frames: list[tuple[str, str]], error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    lines += [f'  File "{path}", line 1, in {function}\n    x()' for path, function in frames]
    return "\n".join([*lines, error])


USER = ("/job/train.py", "<module>")
SITE = "/usr/lib/python3.11/site-packages"


@pytest.mark.parametrize(
    ("frames", "error", "expected"),
    [
        # One package calls another's function (or a hook another overrides) with a signature its installed release does
        # not have: an API mismatch, config_error by DESIGN.md whatever fixes it.
        (
            [USER, (f"{SITE}/unsloth/models/llama.py", "_fast_inner_training_loop")],
            "TypeError: _get_batch_samples() takes 3 positional arguments but 4 were given",
            R.CONFIG_ERROR,
        ),
        (
            [USER, (f"{SITE}/trl/trainer/grpo_trainer.py", "__init__")],
            "AttributeError: 'TrainingArguments' object has no attribute 'model_init_kwargs'",
            R.CONFIG_ERROR,
        ),
        # The same in the user's own script is the user's call (torch's __getattr__ only forwards the lookup): no
        # package is out of step, and only the prior of AttributeError (config_error in dev/) offers a guess.
        (
            [USER, (f"{SITE}/torch/nn/modules/module.py", "__getattr__")],
            "AttributeError: 'LlamaForCausalLM' object has no attribute 'module'",
            R.CONFIG_ERROR,
        ),
        ([USER], "TypeError: Trainer.__init__() missing 1 required positional argument: 'model'", R.CONFIG_ERROR),
        # A library calling the user's own function (a datasets map function) with other arguments than it takes:
        # no version mismatch (datasets' own rule reads it).
        (
            [USER, (f"{SITE}/datasets/arrow_dataset.py", "apply_function_on_filtered_inputs")],
            "TypeError: preprocess() takes 1 positional argument but 2 were given",
            R.BAD_INPUT,
        ),
    ],
)
def test_a_call_between_packages_out_of_step_is_an_api_mismatch(frames, error, expected):
    assert explain(_raised(frames, error), 1).reason is expected


def test_ipython_frames_are_read():
    tail = [
        "TypeError                                 Traceback (most recent call last)",
        "/usr/local/lib/python3.10/dist-packages/unsloth/models/llama.py in _fast_inner_training_loop(self, batch)",
        "File ~/venv/lib/python3.11/site-packages/transformers/trainer.py:1539, in Trainer.train(self, **kwargs)",
        "TypeError: f() takes 3 positional arguments but 4 were given",
    ]
    chain = last_chain(tail)
    assert [f.function for f in chain[0].frames] == ["_fast_inner_training_loop", "Trainer.train"]


# The best guess from an exception's type (outcomes/priors.py), for a log whose words no rule reads.
UNREAD_VALUE = [
    "Traceback (most recent call last):",
    '  File "/job/train.py", line 40, in <module>',
    "ValueError: the frobnicator wants 3 widgets, got 2",
]


def test_an_unread_exception_gets_the_reason_its_type_most_often_means_as_a_guess_that_says_so():
    verdict = explain("\n".join(UNREAD_VALUE), 1)
    assert verdict.reason is R.CONFIG_ERROR
    assert verdict.message.startswith("Best guess from the exception's type alone")
    assert "labelled logs" in verdict.message and "exit 1" in verdict.message
    assert "ValueError: the frobnicator wants 3 widgets, got 2" in verdict.message
    assert verdict.evidence == "ValueError: the frobnicator wants 3 widgets, got 2"


def test_the_guess_holds_only_before_training_where_the_corpus_counted_it():
    after_a_step = ["{'loss': 2.1, 'grad_norm': 0.4, 'learning_rate': 0.0002, 'epoch': 0.1}", *UNREAD_VALUE]
    verdict = explain("\n".join(after_a_step), 1)
    assert verdict.reason is R.UNKNOWN and "ValueError: the frobnicator" in verdict.message


def test_an_exception_written_within_a_line_is_seen():
    verdict = explain("Beim Training ist ein Fehler aufgetreten: FrobnicationError: the widget broke\n", 1)
    assert verdict.reason is R.UNKNOWN and "FrobnicationError: the widget broke" in verdict.message
    guessed = explain("Training failed with ValueError: the frobnicator wants 3 widgets\n", 1)
    assert guessed.reason is R.CONFIG_ERROR and guessed.message.startswith("Best guess")


AGENT_TERM = (
    "W0101 10:00:03.000000 42 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
    "shutting down workers"
)


def test_a_launchers_sigterm_after_another_process_failed_is_that_failure_not_a_preemption():
    alone = explain("[default0]: INFO step 0\n" + AGENT_TERM)
    assert alone.reason is R.PREEMPTED
    unread = [
        "[default1]: Traceback (most recent call last):",
        '[default1]:   File "/job/server.py", line 3, in <module>',
    ]
    guessed = explain("\n".join([*unread, "[default1]: ValueError: port range exhausted", AGENT_TERM]))
    assert guessed.reason is R.CONFIG_ERROR and "SIGTERM" in guessed.message
    unknown = explain("\n".join([*unread, "[default1]: FrobnicationError: the widget broke", AGENT_TERM]))
    assert unknown.reason is R.UNKNOWN and "not a preemption" in unknown.message
    assert unknown.evidence and "FrobnicationError" in unknown.evidence


def test_a_memory_monitors_summary_that_killed_none_is_no_oom():
    line = (
        "(raylet) node_manager.cc:3040: 0 Workers (tasks / actors) killed due to memory pressure (OOM), 3 Workers "
        "crashed due to other reasons at node (ID: 2c82, IP: 10.0.0.7) over the last time period."
    )
    assert explain(line, 1).reason is R.UNKNOWN
    assert explain(line.replace(": 0 Workers", ": 2 Workers"), 1).reason is R.OOM


def test_a_nan_metric_a_later_line_logs_finite_again_decides_nothing():
    assert explain("iteration 10 | grad norm: nan |\niteration 11 | grad norm: 1.52 |").reason is R.UNKNOWN
    assert explain("iteration 10 | grad norm: 1.52 |\niteration 11 | grad norm: nan |").reason is R.DIVERGED


def test_a_refusals_words_count_on_the_exceptions_own_line_not_in_advice_around_it():
    advice = [*UNREAD_VALUE[:2], "FrobnicationError: the widget broke", "Hint: bf16 is not supported on this GPU"]
    assert explain("\n".join(advice), 1).reason is R.UNKNOWN
    refused = [*UNREAD_VALUE[:2], "FrobnicationError: bf16 is not supported on this GPU"]
    assert explain("\n".join(refused), 1).reason is R.CONFIG_ERROR
    # A device runtime's error code is the driver answering, not a library refusing a setting.
    assert explain("RuntimeError: CUDA error: operation not supported", 1).reason is R.UNKNOWN


def test_the_priors_table_is_the_one_the_dev_corpus_gives():
    proc = run_bench("exception_priors.py", "--check", timeout_s=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


COMMIT_FRAMES = [
    "Traceback (most recent call last):",
    '  File "/job/train.py", line 40, in <module>',
    '  File "/usr/lib/python3.11/site-packages/huggingface_hub/hf_api.py", line 1, in {function}',
    '  File "/usr/lib/python3.11/site-packages/huggingface_hub/utils/_http.py", line 1, in hf_raise_for_status',
    "huggingface_hub.errors.BadRequestError: (Request ID: Root=1-66aa)",
    "",
    "Bad request:",
    "the frobnication quota of this namespace is spent",
]


def test_a_commit_the_hub_refuses_for_its_content_is_the_push_failing_whenever_it_ran():
    """No wording names the refusal: that the Hub answered a commit with a 400 is what says the push failed."""
    commit = explain("\n".join(COMMIT_FRAMES).replace("{function}", "create_commit"), 1)
    assert commit.reason is R.HUB_ERROR
    # A repo refused before anything was sent is no failed push.
    repo = explain("\n".join(COMMIT_FRAMES).replace("{function}", "create_repo"), 1)
    assert repo.reason is not R.HUB_ERROR


FINISHED = "Training completed. Do not forget to share your model on huggingface.co/models =)"
SERVER_ERROR = "requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: https://example.com/x"


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        # Training finished, the upload began, a server failed: the push failed, whatever the destination.
        ([FINISHED, "Uploading model.safetensors to s3://acme-models/run-7", SERVER_ERROR], R.HUB_ERROR),
        # ...and so did a refusal of the token then (DESIGN.md: the same refusal once training finished).
        ([FINISHED, "Pushing to acme/llama-ft", "401 Client Error: Unauthorized for url: https://x/up"], R.HUB_ERROR),
        # A download after training (an evaluation's data) is no push.
        ([FINISHED, "Downloading data: 100%|██████████| 2.1M/2.1M", SERVER_ERROR], R.INFRA_TRANSIENT),
        # An upload before training finished (a dataset pushed first) says nothing of the push after it.
        (["Uploading the tokenized data to acme/data", "{'loss': 1.2}", SERVER_ERROR], R.INFRA_TRANSIENT),
    ],
)
def test_a_server_failure_while_uploading_after_training_is_the_push(tail, expected):
    assert explain("\n".join(tail), 1).reason is expected


RANK_OOM = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/job/train.py", line 9, in <module>',
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]


def test_the_terminals_ctrl_c_echo_is_someone_stopping_the_job_unless_a_failure_came_first():
    step = "{'loss': 1.2, 'epoch': 0.1}"
    ctrl_c = "^C[2024-06-01 10:00:00] [INFO] [launch.py:1:sigkill_handler] Killing subprocess 4242"
    stopped = explain("\n".join([step, ctrl_c]))
    assert stopped.reason is R.CANCELLED and "SIGINT" in stopped.message
    # A rank's OOM, the others hung at a collective until someone pressed Ctrl-C: the OOM ended the job.
    assert explain("\n".join([step, *RANK_OOM, ctrl_c])).reason is R.OOM


def test_a_time_limits_words_inside_another_failures_message_are_no_time_limit():
    """A harness's `Timeout expired` alone on its line is its time limit; the words inside a client's error are a
    connection's timeout."""
    assert explain("Pass 2: FAIL\n  Timeout expired", 1).reason is R.TIMEOUT
    assert explain("psycopg2.OperationalError: timeout expired", 1).reason is not R.TIMEOUT


# rich's traceback (typer's, an app's rich.traceback): frames in a box, a long one folded over two of its lines, a frame
# of a file not on disk as `in function:line`; the exception after the box.
RICH_BOX = [
    "╭───────────────────── Traceback (most recent call last) ──────────────────────╮",
    "│ /job/train.py:88 in main                                                     │",
    "│                                                                              │",
    "│ ❱  88 │   trainer.train()                                                    │",
    "│                                                                              │",
    "│ /usr/lib/python3.11/site-packages/accelerate/accelerator.py:1204 in prepare  │",
    "│ /usr/lib/python3.11/site-packages/deepspeed/runtime/zero/partition_parameter │",
    "│ s.py:512 in _convert_to_deepspeed_param                                      │",
    "│ in wrapped_fn:31                                                             │",
    "╰──────────────────────────────────────────────────────────────────────────────╯",
    "RuntimeError: the frobnicator refused",
]


def test_rich_boxed_frames_are_read_as_pythons():
    chain = last_chain(RICH_BOX)
    assert [e.name for e in chain] == ["RuntimeError"]
    assert [f.function for f in chain[0].frames] == ["main", "prepare", "_convert_to_deepspeed_param", "wrapped_fn"]
    assert chain[0].frames[2].path.endswith("deepspeed/runtime/zero/partition_parameters.py")


def test_a_message_wrapped_at_a_consoles_width_is_read_whole_but_short_lines_are_not_joined():
    wrapped = "AssertionError: Check batch related parameters. train_batch_size is not equal\nto micro_batch_per_gpu"
    assert explain(wrapped, 1).reason is R.CONFIG_ERROR
    # Two short lines that each end a sentence are not one wrapped line: their words are not read across the break.
    short = "FrobnicationError: Check batch related parameters.\ntrain_batch_size is not equal to anything"
    assert explain(short, 1).reason is R.UNKNOWN


JAX_PEER = (
    "F0926 17:26:32.075587  157988 client.h:77] Terminating process because the JAX distributed service detected "
    "fatal errors. This most likely indicates that another task died"
)


def test_a_collective_losing_a_peer_is_the_network_only_when_nothing_else_failed():
    assert explain(JAX_PEER, 1).reason is R.INFRA_TRANSIENT
    # Every rank says it when any rank dies: another process's failure in the same log is why the peer went away.
    assert (
        explain("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + JAX_PEER, 1).reason
        is R.OOM
    )
    assert explain("\n".join([*UNREAD_VALUE, JAX_PEER]), 1).reason is R.CONFIG_ERROR
    unread = [*UNREAD_VALUE[:2], "FrobnicationError: the widget broke", JAX_PEER]
    assert explain("\n".join(unread), 1).reason is R.UNKNOWN


def test_a_config_systems_frames_decide_only_where_it_raised():
    """Hydra's frames wrap the whole job: an exception raised in the job's code under them is not the config's."""
    hydra = '  File "/usr/lib/python3.11/site-packages/hydra/_internal/utils.py", line 1, in run_and_report'
    raised_in_hydra = ["Traceback (most recent call last):", hydra, "KeyError: 'frobnicator'"]
    assert explain("\n".join(raised_in_hydra), 1).reason is R.CONFIG_ERROR
    under_hydra = [*raised_in_hydra[:2], '  File "/job/train.py", line 3, in main', "FrobnicationError: it broke"]
    assert explain("\n".join(under_hydra), 1).reason is R.UNKNOWN
