#!/usr/bin/env bash
# The optimised build: profile-guided (PGO), fat LTO, one codegen unit.
#
#   scripts/pgo.sh profile          train once: target/pgo/vramkit.profdata
#   scripts/pgo.sh cargo ARGS...    cargo ARGS with that profile (trained
#                                   first if missing), in target/pgo
#
# For example:
#   scripts/pgo.sh cargo build --release -p vramkit-cli -p vramkit-capi
#       -> target/pgo/release/vramkit, target/pgo/release/libvramkit_capi.so
#   scripts/pgo.sh cargo bench -p vramkit-bench --bench hot_path
#
# Training runs instrumented builds of the CLI and the bench examples on
# what vramkit is for: every command on the snapshots in
# data/traces/pytorch_snapshots and on a 300,000-entry synthetic trace, and
# cache-hit malloc/free pairs through the core, SharedAllocator and the C
# ABI. The profile is a build output (never committed): it fits the
# compiler and the sources it was made with, so make it again after either
# changes (`profile` again, or delete target/pgo/vramkit.profdata).
# Decisions are the same with and without it; only speed differs.
#
# Needs llvm-profdata from the toolchain: `rustup component add llvm-tools`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
gen_dir="$root/target/pgo-gen"
use_dir="$root/target/pgo"
profile="$use_dir/vramkit.profdata"

die() {
    echo "scripts/pgo.sh: $*" >&2
    exit 1
}

# Fat LTO and one codegen unit, for release builds and benches.
release_profile() {
    export CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
    export CARGO_PROFILE_BENCH_LTO=fat CARGO_PROFILE_BENCH_CODEGEN_UNITS=1
}

profdata_tool() {
    local host tool
    host=$(rustc -vV | sed -n 's/^host: //p')
    tool="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
    [[ -x "$tool" ]] || die "llvm-profdata is not in the toolchain ($tool); install it with: rustup component add llvm-tools"
    echo "$tool"
}

train() {
    local tool raw work bin
    tool=$(profdata_tool)
    raw="$gen_dir/raw"
    rm -rf "$raw"
    mkdir -p "$raw" "$use_dir"
    echo "scripts/pgo.sh: building instrumented binaries in $gen_dir" >&2
    # The same LTO as the optimised build: under fat LTO the C entry points
    # of a cdylib are other functions to the profile than in a plain build.
    release_profile
    RUSTFLAGS="-Cprofile-generate=$raw" cargo build --release --target-dir "$gen_dir" \
        -p vramkit-cli --bins -p vramkit-bench --examples
    bin="$gen_dir/release"
    work=$(mktemp -d /tmp/vramkit-pgo.XXXXXX)
    trap 'rm -rf "$work"' RETURN
    echo "scripts/pgo.sh: training" >&2
    "$bin/examples/synthetic_trace" 300000 "$work/synthetic.pickle" >/dev/null
    for snapshot in data/traces/pytorch_snapshots/*.pickle "$work/synthetic.pickle"; do
        for command in summary verify replay doctor tune; do
            "$bin/vramkit" "$command" "$snapshot" >/dev/null 2>&1 || true
        done
        "$bin/vramkit" report "$snapshot" -o "$work/report.html" >/dev/null 2>&1 || true
    done
    REPLAYS=2 "$bin/examples/phases" "$work/synthetic.pickle" >/dev/null
    for front in core shared capi; do
        for size in 512 4194304; do
            "$bin/examples/pairs" "$size" 2000000 "$front" >/dev/null
        done
    done
    "$tool" merge -o "$profile" "$raw"
    echo "scripts/pgo.sh: profile written to $profile" >&2
}

case "${1:-}" in
    profile)
        train
        ;;
    cargo)
        shift
        [[ -f "$profile" ]] || train
        export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Cprofile-use=$profile"
        export CARGO_TARGET_DIR="$use_dir"
        release_profile
        exec cargo "$@"
        ;;
    *)
        sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
