# The two set-up commands of the README: `make demo` and `make test`.
# Both install exactly the tested versions: the lock (pip's -c), which `make lock` refreshes on purpose.
# torch is installed first, at the lock's version (the CPU build this machine holds on its disk), so
# the project's range is already satisfied and pip never fetches a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
LOCK := src/jobtrail/data/tested-versions.txt
TORCH_PIN := torch==$(shell sed -n 's/^torch==//p' $(LOCK))

.PHONY: demo lint test bench soak bench-train bench-train-gpu bench-ledger lock drift

# The MCP Inspector (npm) for the test that drives the server through its CLI mode.
INSPECTOR := .tools/node_modules/.bin/mcp-inspector
$(INSPECTOR):
	npm install --silent --no-fund --no-audit --prefix .tools @modelcontextprotocol/inspector@0.15.0

$(VENV)/.installed: pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_PIN)"
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[train,gguf,dev]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/jobtrail demo

# The lint gate, run before the tests: ruff (lint and format check) over the code, mypy --strict over src/ and
# scripts/ (the job side) (both configured in pyproject.toml). A violation fails `make test`.
LINT_PATHS := src tests bench scripts tools

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check --output-format concise $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy

# Two workers (pytest-xdist): most of the suite's time is jobs it waits on (each job one torch thread), so two
# workers keep both cores of a small CI machine busy; each worker has its own temporary dirs and caches. Tests go to
# whichever worker is free, the modules of minute-long job tests first (tests/conftest.py), so both end together.
test: lint $(VENV)/.installed $(INSPECTOR)
	$(PY) -m pytest -q -n 2 $(PYTEST_ARGS)

# Move the tested versions on purpose: resolve the newest releases (uv), rebuild the venv on them, regenerate the
# bundled tables, run the suite, and print what moved (and what broke). Commit the result as one change.
lock: $(VENV)/.installed
	python3 tools/lock.py refresh

# What `make lock` would move today (packages, and the bundled tables derived from them). Changes nothing and
# never fails: run it now and then to see drift before it breaks anything.
drift: $(VENV)/.installed
	python3 tools/lock.py drift

bench: $(VENV)/.installed
	$(PY) bench/startup.py
	$(PY) bench/overhead.py

# Concurrent MCP clients on real stdio servers while jobs and servers are killed; audits the ledger (< 3 min).
soak: $(VENV)/.installed
	$(PY) bench/soak.py

# A ledger of 100,000 realistic attempts (bench/ledger_scale.py): bytes per attempt, p50/p99 of ps, inspect and
# report, in SQLite and in a PostgreSQL the bench starts (the machine's server binaries; ~1 h on 2 cores).
bench-ledger: $(VENV)/.installed
	$(PY) bench/ledger_scale.py --postgres

# The rendered SFT job against plain TRL SFT (bench/train_throughput.py): tokens/s, memory, MFU, loss.
# bench-train is its CPU smoke (tiny model built offline, < 1 min); bench-train-gpu, on a GPU machine with
# the Hub, runs the 0.5B full fine-tuning and the 7B LoRA (without the Hub: --offline-shape, see the script).
bench-train: $(VENV)/.installed
	$(PY) bench/train_throughput.py --cpu-smoke

bench-train-gpu: $(VENV)/.installed
	$(PY) bench/train_throughput.py
	$(PY) bench/train_throughput.py --model Qwen/Qwen2.5-7B --peft lora
