# Two commands (docs/development.md): `make run` and `make test`. Each sets up what is missing first.
#   PLATFORM=ubuntu22.04  the platform row .venv is made for (default ubuntu24.04; README, "Platforms")
#   PYTHON=python3.12     interpreter for the venv (default: the row's)
#   ROS=jazzy             PyPI ROS 2 wheels to use where no ROS 2 is sourced (default: the row's)
#   MODEL=tiny-random     run the plumbing without weights (output is meaningless)
#   ARGS=...              extra arguments: pytest's for `make test`, the node's for `make run`
#   WORKERS=2             pytest-xdist workers for `make test` (0: one process, no xdist)
PLATFORM ?=
PYTHON ?=
ROS ?=
VENV ?= .venv
MODEL ?=
ARGS ?=
WORKERS ?= 2
export PLATFORM PYTHON ROS VENV

PY := $(VENV)/bin/python
SANDBOX := tools/ros_sandbox.sh
LINTED := $(wildcard tt_sam3_ros test tools benchmarks launch setup.py)
# The other platform rows (README, "Platforms"): their own venv each, their own tests.
HUMBLE_VENV := .venv-humble
NUMPY2_VENV := .venv-numpy2
# What the Humble row runs: the unit tests and the node's integration tests (the real node in its
# own process over rclpy). Not the full-size model runs (marked slow), the emulated chip's numerics
# (test/unit/ttnn: torch arithmetic that the platform does not change; the main row runs them) nor
# what needs the real ttnn wheel (none for numpy 1.21).
HUMBLE_TESTS := test/unit --ignore=test/unit/ttnn $(wildcard test/integration/test_node*.py test/integration/test_plumbing.py)
# The numpy 2 row: the unit tests (as above) and the benchmarks' quick run (the tracking benchmark's
# ByteTrack needs numpy 2).
NUMPY2_TESTS := test/unit --ignore=test/unit/ttnn test/integration/test_benchmarks_quick.py
OTHER_ROWS_MARK := not slow and not ttnn_wheel
# Most of the suite's time is a node process starting or a test waiting on one: two workers keep
# both cores busy. A file's tests stay on one worker, so its module fixtures are built once.
PYTEST := -m pytest -n $(WORKERS) --dist loadfile

.PHONY: setup test test-main test-humble test-numpy2 lint run bench clean ttnn-env

setup:
	@bash tools/bootstrap.sh

lint: setup
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

# The real ttnn wheel beside a venv that lacks it (another PLATFORM's): CPython 3.12, no torch. The
# ubuntu24.04 row's .venv has ttnn itself, and the mock-p150a checks then run there with real torch.
ttnn-env:
	@bash tools/bootstrap_ttnn.sh

# Everything the suite starts runs with ROS 2 discovery confined to this machine.
# A test with no assertion fails the run before pytest starts (tools/check_test_assertions.py).
test-main: lint
	$(SANDBOX) $(PY) tools/gen_docs.py --check
	$(PY) tools/check_test_assertions.py
	$(SANDBOX) $(PY) $(PYTEST) $(ARGS)

test-humble:
	@env -u VENV -u PYTHON -u ROS PLATFORM=ubuntu22.04 bash tools/bootstrap.sh
	$(SANDBOX) $(HUMBLE_VENV)/bin/python $(PYTEST) -m "$(OTHER_ROWS_MARK)" $(HUMBLE_TESTS)

test-numpy2:
	@env -u VENV -u PYTHON -u ROS PLATFORM=numpy2 bash tools/bootstrap.sh
	$(SANDBOX) $(NUMPY2_VENV)/bin/python $(PYTEST) -m "$(OTHER_ROWS_MARK)" $(NUMPY2_TESTS)

# The main row's whole suite, then the other rows' tests (docs/development.md, "Platforms").
test: test-main test-humble test-numpy2

run: setup
	$(VENV)/bin/sam3_node --ros-args --params-file config/sam3.yaml $(if $(MODEL),-p model_id:=$(MODEL)) $(ARGS)

bench: setup
	$(SANDBOX) $(PY) -m benchmarks $(ARGS)

clean:
	rm -rf $(VENV) $(HUMBLE_VENV) $(NUMPY2_VENV) .venv-ttnn build .pytest_cache
