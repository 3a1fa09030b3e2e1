# Two commands do everything on a fresh machine with Python 3.11 and pip:
#   make demo   installs, builds memory from the sample conversation, answers questions with evidence
#   make test   installs and runs the whole test suite
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= .compassmem-demo

.PHONY: install demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall when the dependency list changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	# torch first, pinned: the CPU wheel lies on local disk; letting a resolver choose pulls a CUDA build.
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	COMPASSMEM_DATA_DIR=$(DEMO_DIR) $(BIN)/compassmem ingest examples/sample_conversation.jsonl
	COMPASSMEM_DATA_DIR=$(DEMO_DIR) $(BIN)/compassmem ask priya-tom \
		"Why was the Atlas launch moved, and when did it finally launch?" \
		"When did Priya adopt Biscuit?" \
		"Who climbed Angels Landing?"

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks.ingest_throughput
	$(BIN)/python -m benchmarks.memory_report

clean:
	rm -rf $(DEMO_DIR) results
