#!/usr/bin/env bash
# CI for the vramkit Python package: builds the wheel the way users install
# it (`pip install ./bindings/python`: pip + maturin from PyPI, which also
# builds the `vramkit` command and the simulated CUDA stacks into it), puts
# it into throw-away virtual environments that have torch's CUDA wheel,
# runs the extension's Rust unit tests and the pytest suite, and fails on
# any error.
#
#   bash bindings/python/ci.sh
#
# Environments: torch $VRAMKIT_PY_TORCH (default 2.15.0, a CUDA 13 wheel)
# runs the whole suite; torch $VRAMKIT_PY_TORCH_CU12 (default 2.10.0, CUDA
# 12) runs the tests on the simulated GPU again, on the other stack the
# wheel ships. Set either to `none` to leave it out (the tests that need
# torch then skip). Torch wheels come from `pip download --no-deps` into
# $VRAMKIT_PYTORCH_CACHE/wheels (default target/pytorch-harness, which the
# Rust tests fill), and are installed without their NVIDIA libraries, which
# the simulated GPU replaces; their pure-Python requirements come from PyPI.
#
# Nothing is written into the repository except build outputs under the
# ignored target/python (kept, so the next run is incremental); set
# VRAMKIT_PY_TARGET_DIR to put them elsewhere. PYTHON picks the interpreter.
# GPU tests run only where PyTorch sees a real GPU (they skip here).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
export CARGO_TARGET_DIR="${VRAMKIT_PY_TARGET_DIR:-$repo/target/python}"
export VRAMKIT_PYTORCH_CACHE="${VRAMKIT_PYTORCH_CACHE:-$repo/target/pytorch-harness}"
export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
torch_main="${VRAMKIT_PY_TORCH:-2.15.0}"
torch_cu12="${VRAMKIT_PY_TORCH_CU12:-2.10.0}"
start=$SECONDS
say() { echo "== [$((SECONDS - start)) s] $*"; }

work="$(mktemp -d "${TMPDIR:-/tmp}/vramkit-py-ci.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The simulated GPU is installed into the user's cache on first use.
export XDG_CACHE_HOME="$work/user-cache"

# venv DIR TORCH_VERSION: a fresh virtual environment with that torch (none:
# without torch), the wheel built below and pytest.
venv() {
    local dir=$1 version=$2
    "$python" -m venv "$dir"
    if [ "$version" != none ]; then
        say "torch $version (the CUDA wheel, without its NVIDIA libraries) into $dir"
        local wheels="$VRAMKIT_PYTORCH_CACHE/wheels" tag wheel
        mkdir -p "$wheels"
        tag="$("$dir/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
        "$dir/bin/python" -m pip download --quiet --no-deps -d "$wheels" "torch==$version"
        wheel="$(ls "$wheels"/torch-"$version"-*"$tag"-*.whl | head -n 1)"
        "$dir/bin/python" -m pip install --quiet --no-deps --no-warn-conflicts "$wheel"
        # torch's pure-Python requirements, as its metadata lists them.
        "$dir/bin/python" - <<'EOF' > "$dir/torch-requirements.txt"
import importlib.metadata
for requirement in importlib.metadata.requires("torch") or []:
    name = requirement.split(";")[0].strip().lower()
    if "extra ==" not in requirement and not name.startswith(("nvidia", "triton", "cuda-")):
        print(requirement)
print("numpy")  # not required, but in every training environment
EOF
        "$dir/bin/python" -m pip install --quiet --no-warn-conflicts -r "$dir/torch-requirements.txt"
    fi
    "$dir/bin/python" -m pip install --quiet --no-warn-conflicts "$built[test]"
}

say "pip wheel bindings/python (maturin builds the extension, the vramkit command and the simulated CUDA stacks)"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$here"
built="$(ls "$work"/dist/vramkit-*.whl)"
echo "   $(basename "$built"): $(($(stat -c %s "$built") / 1024)) KiB"

venv "$work/venv" "$torch_main"
venv_python="$work/venv/bin/python"

# The extension's Rust unit tests link libpython (no `extension-module`
# feature), which needs a shared-library build of Python.
if [ "$("$venv_python" -c 'import sysconfig; print(sysconfig.get_config_var("Py_ENABLE_SHARED") or 0)')" = "1" ]; then
    say "cargo test (the extension's Rust unit tests)"
    cargo test --release --quiet --manifest-path "$here/Cargo.toml"
else
    say "cargo test skipped: this Python is not built as a shared library"
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

cd "$work"
if [ "$torch_main" != none ]; then
    # torch is there: the tests on the simulated GPU must run, not skip.
    export VRAMKIT_REQUIRE_SIMGPU=1
fi
say "pytest (torch $torch_main)"
"$venv_python" -m pytest -p no:cacheprovider -q -rs "$here/tests"

if [ "$torch_cu12" != none ]; then
    venv "$work/venv-cu12" "$torch_cu12"
    say "pytest on the CUDA 12 stack (torch $torch_cu12)"
    VRAMKIT_REQUIRE_SIMGPU=1 "$work/venv-cu12/bin/python" -m pytest -p no:cacheprovider -q -rs \
        "$here/tests/test_enable_training.py" "$here/tests/test_run.py::test_the_command_runs_a_program_on_the_shipped_stack"
fi

echo "== bindings/python/ci.sh passed in $((SECONDS - start)) s"
