#!/usr/bin/env bash
# Fuzzes each target for SECONDS (default 60) with libFuzzer, one after the
# other, and prints one line per target: executions, executions per second,
# corpus size, and findings (crash, timeout or out-of-memory inputs).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). On a stable toolchain the
# nightly flags cargo-fuzz passes are allowed with RUSTC_BOOTSTRAP=1, set
# here. The corpus of each target starts from fuzz/seeds/<target>/ (for
# pickle and snapshot also the real traces under 128 KiB in
# data/traces/pytorch_snapshots) and grows in fuzz/corpus/<target>/, which
# git ignores. Findings land in fuzz/artifacts/<target>/; minimize one with
# `cargo fuzz tmin TARGET FILE`, add it to fuzz/regressions/<target>/ (the
# tests replay every file there), and fix the bug.
#
# Exit status: 0 when no target found anything, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(pickle snapshot json rmm alloc_conf actions)
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=never

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed (cargo install cargo-fuzz); skipped" >&2
    exit 0
fi
cargo fuzz build || exit 1

mkdir -p logs
found=0
printf '%-11s %8s %12s %10s %8s %s\n' target seconds executions exec/s corpus findings
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null
    max_len=4096
    case $t in
        pickle | snapshot)
            find ../data/traces/pytorch_snapshots -name '*.pickle' -size -128k -exec cp -n {} "corpus/$t/" \;
            max_len=131072 ;;
        json) max_len=32768 ;;
    esac
    before=$(ls "artifacts/$t" | wc -l)
    cargo fuzz run "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"logs/$t.log" 2>&1
    status=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' | tail -1)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' | tail -1)
    after=$(ls "artifacts/$t" | wc -l)
    findings=$((after - before))
    if [ "$status" -ne 0 ] && [ "$findings" -eq 0 ]; then findings="exit $status (see fuzz/logs/$t.log)"; fi
    [ "$findings" != 0 ] && found=1
    printf '%-11s %8s %12s %10s %8s %s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" "$(ls "corpus/$t" | wc -l)" "$findings"
done
exit $found
