# Front door. `make demo` and `make test` work on a fresh Debian 12 machine.
BUILD_DIR ?= build
JOBS ?= 2

.PHONY: deps configure build build-all build-tests build-bench demo test test-all test-asan bench fuzz fuzz-smoke clean

# Debian packages, then the venv with the pinned torch (libtorch) and Python reference libraries.
deps:
	@scripts/install_deps.sh
	@scripts/setup_venv.sh > /dev/null

# CTITAN_PYTHON locates libtorch (torch.utils.cmake_prefix_path); a libtorch named with
# CMAKE_PREFIX_PATH=/path/to/libtorch on the make line takes precedence.
# A new build directory uses Ninja: with CMake's Makefile generator, adding a source file rewrites
# the precompiled header's flags and recompiles the whole tree (half an hour here); Ninja compiles
# only the new file. A directory configured earlier keeps its generator.
NEW_DIR_GENERATOR = $(if $(wildcard $(1)/CMakeCache.txt),,$(if $(shell command -v ninja),-G Ninja))
configure: deps
	@cmake -S . -B $(BUILD_DIR) $(call NEW_DIR_GENERATOR,$(BUILD_DIR)) -DCMAKE_BUILD_TYPE=Release \
	  -DCTITAN_PYTHON=$$(scripts/setup_venv.sh)/bin/python $(if $(CMAKE_PREFIX_PATH),-DCMAKE_PREFIX_PATH=$(CMAKE_PREFIX_PATH)) > /dev/null

# The library, the ctitan binary and the demo tokenizer: what `make demo` needs, nothing more.
# Tests and benchmarks build under `make test` and `make bench`; `make build-all` builds everything.
build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target ctitan demo_assets

build-all: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# bf16 needs bf16 instructions (AVX512-BF16 or AMX) for libtorch's fast CPU GEMMs (AVX-512 alone is
# about 5x slower than fp32: src/ctitan/common/build_info.h); without them the demo trains in fp32.
DEMO_DTYPE = $(shell grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && echo bfloat16 || echo float32)

# The demo's 2 ranks each need a GPU of their own: on a machine with fewer, they train on the CPU.
DEMO_DEVICE = $(shell [ "$$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ] && echo auto || echo cpu)

# FSDP over 2 local ranks (data_parallel_shard_degree = -1 takes every rank), as torchtitan's
# run_train.sh does with NGPU=2; like it, only rank 0's lines are shown.
demo: build
	@[ "$(DEMO_DTYPE)" = bfloat16 ] || [ "$(DEMO_DEVICE)" = auto ] || echo "demo: this CPU has no bf16 instructions (AVX512-BF16 or AMX), so bf16 matmuls would be slow: training in float32"
	$(BUILD_DIR)/bin/ctitan run --nproc-per-node 2 --master-port 0 --local-ranks-filter 0 train --config configs/llama3_debug.toml \
	  --training.mixed_precision_param $(if $(filter auto,$(DEMO_DEVICE)),bfloat16,$(DEMO_DTYPE)) --training.device $(DEMO_DEVICE)

# The suite's binaries: ctitan_tests (its add_dependencies bring ctitan and the test workers).
build-tests: build
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target ctitan_tests

# The default suite: unit and integration tests. Long runs live in `make bench`.
test: build-tests
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L 'unit|integration'

# The unit and integration tests under AddressSanitizer, LeakSanitizer and UBSan, in a build of its
# own (docs/RELIABILITY.md, "Sanitizers"): ctitan's code is instrumented (-DCTITAN_SANITIZE,
# cmake/Sanitizers.cmake), libtorch is linked as it is. -O1 -g1: line numbers in every report, and
# a shorter build than -O2 -g. Not part of CI (too long): run before every submission.
# Tests that start bin/ctitan get this build's binary (CTITAN_BIN) and inherit these variables,
# as do the workers `ctitan run` starts.
ASAN_BUILD_DIR ?= build-asan
SANITIZER_LOGS = $(abspath $(ASAN_BUILD_DIR))/sanitizer-logs
SANITIZER_SUPP = $(abspath tools/sanitizers)
# log_path: every process writes its reports to $(SANITIZER_LOGS)/{asan,ubsan}.PID, and the target
#   fails if one exists. On stderr, the report of a ctitan child that a test expects to fail
#   (non-zero exit, some error text) could pass unseen.
# halt_on_error=1: the first report ends the process (ASan's default; for UBSan, it also covers
#   any check compiled recoverable). detect_leaks=1: LeakSanitizer at each exit (the default on
#   x86-64 Linux, said here because the run depends on it). print_stacktrace=1: UBSan reports
#   carry the stack, as ASan's do. Suppressions: libtorch's own, each justified in its file.
# detect_container_overflow stays on: GCC's libstdc++ annotates no container unless
#   _GLIBCXX_SANITIZE_VECTOR is defined, so uninstrumented libtorch cannot trip it.
test-asan: export ASAN_OPTIONS = halt_on_error=1:detect_leaks=1:log_path=$(SANITIZER_LOGS)/asan
test-asan: export LSAN_OPTIONS = suppressions=$(SANITIZER_SUPP)/lsan.supp:print_suppressions=0
test-asan: export UBSAN_OPTIONS = halt_on_error=1:print_stacktrace=1:suppressions=$(SANITIZER_SUPP)/ubsan.supp:log_path=$(SANITIZER_LOGS)/ubsan
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD_DIR) $(call NEW_DIR_GENERATOR,$(ASAN_BUILD_DIR)) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
	  -DCTITAN_SANITIZE=address,undefined -DCTITAN_PYTHON=$$(scripts/setup_venv.sh)/bin/python \
	  $(if $(CMAKE_PREFIX_PATH),-DCMAKE_PREFIX_PATH=$(CMAKE_PREFIX_PATH)) > /dev/null
	@rm -rf $(SANITIZER_LOGS) && mkdir -p $(SANITIZER_LOGS)
	@cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	@cd $(ASAN_BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L 'unit|integration'; status=$$?; \
	  if [ -n "$$(ls -A $(SANITIZER_LOGS))" ]; then \
	    for f in $(SANITIZER_LOGS)/*; do echo "== $$f"; head -n 40 "$$f"; done >&2; \
	    echo "test-asan: sanitizer reports in $(SANITIZER_LOGS)" >&2; exit 1; fi; \
	  exit $$status

BENCH_TARGETS = train_throughput gpu_throughput kernel_bench checkpoint_bench collectives rpc_bench
build-bench: build
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target $(BENCH_TARGETS)

bench: build-bench
	cd $(BUILD_DIR) && bin/train_throughput
	cd $(BUILD_DIR) && bin/gpu_throughput
	cd $(BUILD_DIR) && bin/kernel_bench
	cd $(BUILD_DIR) && bin/checkpoint_bench
	$$(scripts/setup_venv.sh)/bin/python bench/ddp_scaling.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/fsdp_scaling.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/fsdp_memory.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/tp_scaling.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/tp_memory.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/pp_scaling.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/cp_scaling.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/moe.py --ctitan $(BUILD_DIR)/bin/ctitan --python $$(scripts/setup_venv.sh)/bin/python
	$$(scripts/setup_venv.sh)/bin/python bench/rpc.py --ctitan $(BUILD_DIR)/bin/ctitan
	$$(scripts/setup_venv.sh)/bin/python bench/data_prepare.py --ctitan $(BUILD_DIR)/bin/ctitan --tokenizer $(BUILD_DIR)/assets/fortunes_2k.model
	python3 bench/chaos.py --ctitan $(BUILD_DIR)/bin/ctitan
	for n in 2 4; do OMP_NUM_THREADS=1 $(BUILD_DIR)/bin/ctitan run --nproc-per-node $$n --master-port 0 \
	  --local-ranks-filter 0 --exec $(BUILD_DIR)/bin/collectives || exit 1; done

# libFuzzer targets for the parsers of untrusted input (docs/RELIABILITY.md): a separate clang
# build in build-fuzz/, FUZZ_SECONDS per target, FUZZ_JOBS targets at a time. Not part of `make test`
# (a clang build of its own); CI runs `make fuzz-smoke` after it, 30 s per target, and fails on
# any finding. Longer runs by hand before a release or after touching a parser.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_BUILD_DIR ?= build-fuzz
fuzz: deps
	@command -v clang++ > /dev/null || { echo "fuzz: needs clang with libFuzzer: apt-get install -y clang libclang-rt-dev" >&2; exit 1; }
	@CC=clang CXX=clang++ cmake -S fuzz -B $(FUZZ_BUILD_DIR) $(call NEW_DIR_GENERATOR,$(FUZZ_BUILD_DIR)) -DCTITAN_PYTHON=$$(scripts/setup_venv.sh)/bin/python \
	  $(if $(CMAKE_PREFIX_PATH),-DCMAKE_PREFIX_PATH=$(CMAKE_PREFIX_PATH)) > /dev/null
	@cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS)
	FUZZ_BUILD_DIR=$(abspath $(FUZZ_BUILD_DIR)) FUZZ_JOBS=$(FUZZ_JOBS) fuzz/run_all.sh $(FUZZ_SECONDS)

# Two fuzzers at a time on the 2 cores: each still runs its 30 s on a core of its own.
fuzz-smoke:
	$(MAKE) fuzz FUZZ_SECONDS=30 FUZZ_JOBS=$(JOBS)

clean:
	rm -rf $(BUILD_DIR)
