# The two set-up commands of the README: `make demo` and `make test`.
# torch is pinned to the CPU build first, so the project's range is already satisfied and
# pip never fetches a multi-GB CUDA build (see ../shared/TOOLCHAIN.md).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test bench

# The MCP Inspector (npm) for the test that drives the server through its CLI mode.
INSPECTOR := .tools/node_modules/.bin/mcp-inspector
$(INSPECTOR):
	npm install --silent --no-fund --no-audit --prefix .tools @modelcontextprotocol/inspector@0.15.0

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_PIN)"
	$(PY) -m pip install --quiet -e ".[train,gguf,dev]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/jobtrail demo

test: $(VENV)/.installed $(INSPECTOR)
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) bench/startup.py
	$(PY) bench/overhead.py
