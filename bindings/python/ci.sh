#!/usr/bin/env bash
# CI for the vramkit Python package: builds it the way users install it
# (pip + maturin from PyPI) into a throw-away virtual environment, runs the
# extension's Rust unit tests and the pytest suite, and fails on any error.
#
#   bash bindings/python/ci.sh
#
# Nothing is written into the repository except build outputs under the
# ignored target/python (kept, so the next run is incremental); set
# VRAMKIT_PY_TARGET_DIR to put them elsewhere. PYTHON picks the interpreter.
# GPU tests run only where PyTorch is installed in the venv and sees a GPU
# (they skip here).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
export CARGO_TARGET_DIR="${VRAMKIT_PY_TARGET_DIR:-$repo/target/python}"
export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
start=$SECONDS

work="$(mktemp -d "${TMPDIR:-/tmp}/vramkit-py-ci.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "== venv ($("$python" --version 2>&1)) in $work"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"

echo "== pip install bindings/python[test] (maturin builds the extension)"
"$venv_python" -m pip install --quiet "$here[test]"

# The extension's Rust unit tests link libpython (no `extension-module`
# feature), which needs a shared-library build of Python.
if [ "$("$venv_python" -c 'import sysconfig; print(sysconfig.get_config_var("Py_ENABLE_SHARED") or 0)')" = "1" ]; then
    echo "== cargo test (the extension's Rust unit tests)"
    cargo test --release --quiet --manifest-path "$here/Cargo.toml"
else
    echo "== cargo test skipped: this Python is not built as a shared library"
fi

# The fake CUDA driver (crates/vramkit-fake-cuda), so the CUDA backend's
# tests run here too (test_fake_cuda.py; skipped without a C compiler).
if cc="${CC:-cc}" && command -v "$cc" >/dev/null; then
    mkdir -p "$work/fake-cuda"
    "$cc" -std=gnu11 -O1 -Wall -Wextra -Werror -fPIC -shared -o "$work/fake-cuda/libcuda.so" \
        "$repo/crates/vramkit-fake-cuda/libcuda.c" -lpthread
    export VRAMKIT_FAKE_CUDA_DIR="$work/fake-cuda"
elif [ "${VRAMKIT_REQUIRE_FAKE_CUDA:-0}" = 1 ]; then
    echo "no C compiler for the fake CUDA driver, and VRAMKIT_REQUIRE_FAKE_CUDA=1" >&2
    exit 1
fi

echo "== pytest"
cd "$work"
"$venv_python" -m pytest -p no:cacheprovider -q -rs "$here/tests"

echo "== bindings/python/ci.sh passed in $((SECONDS - start)) s"
