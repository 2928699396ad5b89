#!/usr/bin/env bash
# Create .venv-ttnn: CPython 3.12 with the real ttnn==0.81.1 wheel from PyPI, used only by
# tools/ttnn_conformance.py to check the Blackhole code's calls against the real API off-chip.
# The package never depends on it (on a Blackhole host ttnn comes from the user's tt-metal).
#
#   TTNN_PYTHON  interpreter to use (default: python3.12 on PATH, else pyenv's newest 3.12)
#   TTNN_VENV    where the environment lives (default .venv-ttnn)
#
# Idempotent: a stamp holds the hash of this script; a second run only checks it.
# The wheel is installed without its dependencies: its metadata asks for pandas and seaborn
# (plotting of reports), which `import ttnn` does not need; only what the import needs is
# installed (~0.5 GB in all). Where PyPI cannot be reached the environment is left absent and
# .venv-ttnn/SKIPPED says why; the conformance test then skips with that reason.
set -euo pipefail
cd "$(dirname "$0")/.."

TTNN_VENV=${TTNN_VENV:-.venv-ttnn}
stamp="$TTNN_VENV/.stamp"
skip_file="$TTNN_VENV/SKIPPED"
# Exactly what `import ttnn` 0.81.1 imports, pinned.
deps=(ttnn==0.81.1 "numpy==1.26.4" "loguru==0.7.3" "networkx==3.7" "pyyaml==6.0.4" "click==8.5.1"
      "ml_dtypes==0.5.4" "graphviz==0.21")
want=$( { cat "$0"; printf '%s\n' "${deps[@]}"; } | sha256sum | cut -c1-16)

say() { echo "bootstrap_ttnn: $*" >&2; }

if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$TTNN_VENV/bin/python" ]; then
  exit 0
fi

find_python() {
  if [ -n "${TTNN_PYTHON:-}" ]; then echo "$TTNN_PYTHON"; return; fi
  if python3.12 -c 'import sys' >/dev/null 2>&1; then echo python3.12; return; fi
  local root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  local candidate
  candidate=$(ls -d "$root"/versions/3.12.* 2>/dev/null | sort -V | tail -1)
  if [ -n "$candidate" ] && [ -x "$candidate/bin/python3.12" ]; then echo "$candidate/bin/python3.12"; return; fi
  echo ""
}

py=$(find_python)
if [ -z "$py" ]; then
  say "no CPython 3.12 found (ttnn 0.81.1 has wheels for 3.10 and 3.12 only); set TTNN_PYTHON"
  exit 1
fi

rm -rf "$TTNN_VENV"
say "creating $TTNN_VENV with $py and ttnn 0.81.1 (about 100 MB download, once) ..."
"$py" -m venv "$TTNN_VENV"
pip_quiet() {
  "$TTNN_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
    2> >(grep -v -e "is neither a file nor a directory" -e "dependency conflicts" -e "requires pandas" \
               -e "requires seaborn" -e "resolver does not currently" >&2)
}
if ! pip_quiet --no-deps "${deps[0]}" || ! pip_quiet "${deps[@]:1}"; then
  if ! "$py" -m pip download --quiet --no-deps --dest /tmp/.ttnn-probe "packaging==24.2" >/dev/null 2>&1; then
    say "PyPI cannot be reached: the ttnn API conformance check will be skipped"
    rm -rf "$TTNN_VENV"
    mkdir -p "$TTNN_VENV"
    echo "PyPI unreachable when bootstrapping .venv-ttnn" > "$skip_file"
    exit 0
  fi
  say "installing ttnn failed although PyPI answers"
  exit 1
fi
"$TTNN_VENV/bin/python" -c 'import ttnn' >/dev/null 2>&1 || { say "ttnn does not import"; exit 1; }
echo "$want" > "$stamp"
say "done ($(du -sh "$TTNN_VENV" | cut -f1))"
