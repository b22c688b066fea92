# ZoneGate — the two commands that matter: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two installs: `make run` needs the runtime and the aws cli of the README (the `cli` extra);
# `make test` adds the test extra on top. Each stamp is redone when pyproject.toml changes, or
# the one compiled module (setup.py: multi-buffer MD5).
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
NATIVE     := setup.py gateway/s3/md5lanes.c gateway/s3/md5lanes_x8.h

# Server processes: glibc's default trim/mmap thresholds make CPython regrow its heap for every
# large buffer; these settings were measured to matter 2-12x (shared/notes/performance.md).
export MALLOC_TRIM_THRESHOLD_ ?= 268435456
export MALLOC_TOP_PAD_ ?= 67108864
export MALLOC_MMAP_THRESHOLD_ ?= 268435456

.PHONY: venv run test lint soak bench test-zoned clean

venv: $(TEST_STAMP)

$(RUN_STAMP): pyproject.toml $(NATIVE)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[cli]'
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# `make run ARGS="--port 9100 --tls"`: options for `zonegate dev`
run: $(RUN_STAMP)
	$(BIN)/zonegate dev $(ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .

# `make test TEST_WORKERS=2`: two workers, a test file each at a time; one by default (14:33 on
# a quiet 2-core machine, 1,835 tests), as timing-bound tests still fail beside a busy worker.
TEST_WORKERS ?= 1

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not soak and not qemu" $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) --durations=25

soak: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -m soak

bench: $(TEST_STAMP)
	$(BIN)/python -m bench

# The zoned-device tests inside a QEMU guest (NVMe ZNS and null_blk), and the harness's own
# checks (a crashed or hung guest told apart from failing tests): about 5 minutes under TCG.
test-zoned: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -m "qemu and not soak" tests/zonestore/test_zoned_qemu.py

clean:
	rm -rf $(VENV) data .pytest_cache
