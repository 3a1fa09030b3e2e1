# Two commands do everything on a fresh machine with Python 3.11 and pip:
#   make demo   installs, builds memory from the sample conversation, answers questions with evidence
#   make test   installs and runs the whole test suite
#   make docs   builds the documentation site from docs/ into site/
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= .compassmem-demo

.PHONY: install tools demo test docs bench dashboard-plot clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall when the dependency list changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	# torch first, pinned: the CPU wheel lies on local disk; letting a resolver choose pulls a CUDA build.
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[test,bench,docs,langchain,otel]"
	touch $@

install: $(VENV)/.installed

# promtool (Debian's prometheus package) checks and unit-tests the alert rules, amtool (prometheus-alertmanager)
# checks the Alertmanager config: tests/test_monitoring_files.py. Chromium (Debian's chromium) is the browser the
# explorer's Playwright tests drive (tests/test_explorer_browser.py): Playwright's own browser download is not used.
# Node and npm (Debian's nodejs, npm) build and test the TypeScript client (tests/test_typescript_client.py). curl
# runs the README tour's request as a reader would (tests/test_readme_tour.py).
tools:
	@missing=; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v amtool >/dev/null || missing="$$missing prometheus-alertmanager"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	[ -z "$$missing" ] || { \
		if [ "$$(id -u)" -eq 0 ]; then sudo=; \
		elif command -v sudo >/dev/null; then sudo=sudo; \
		else echo "test tools missing; installing them needs root or sudo: apt-get install$$missing" >&2; exit 1; fi; \
		command -v apt-get >/dev/null || { echo "test tools missing and there is no apt-get: install$$missing" >&2; exit 1; }; \
		echo "installing Debian packages:$$missing"; \
		$$sudo apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; }

demo: install
	COMPASSMEM_DATA_DIR=$(DEMO_DIR) $(BIN)/compassmem ingest examples/sample_conversation.jsonl
	COMPASSMEM_DATA_DIR=$(DEMO_DIR) $(BIN)/compassmem ask priya-tom \
		"Why was the Atlas launch moved, and when did it finally launch?" \
		"When did Priya adopt Biscuit?" \
		"Who climbed Angels Landing?"

test: install tools
	$(BIN)/python -m pytest -q

# The documentation site (mkdocs.yml); --strict: a broken link or a missing page fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: install
	$(BIN)/python -m benchmarks.ingest_throughput $(if $(DATA),--data $(DATA))
	$(BIN)/python -m benchmarks.memory_report $(if $(DATA),--data $(DATA))

# The figures of the Grafana dashboard over a streamed development conversation, as a PNG (docs/monitoring.md).
dashboard-plot: install
	$(BIN)/python -m benchmarks.dashboard_plot --out docs/dashboard.png $(if $(DATA),--data $(DATA))

clean:
	rm -rf $(DEMO_DIR) results site
