#!/usr/bin/env bash
# The GPU checklist in one command, on a GPU machine with no network, from
# the kit scripts/gpu/prepare.sh built (gpu-kit/, carried beside the
# repository):
#
#   bash scripts/gpu/run.sh [STEP...]        (from the repository root)
#
# Steps, in this order (default: all):
#   tests   the test executables of `cargo test -p vramkit-cuda -p vramkit-capi`,
#           each run as `EXE --test-threads=1 --nocapture` from its crate folder
#   smoke   crates/vramkit-capi/scripts/pytorch_smoke.py on the release library
#   pytest  python3 -m pytest -rs bindings/python/tests, with the kit's wheel
#   bench   scripts/gpu/bench_torch.py train: native vs vramkit training steps
#   micro   scripts/gpu/bench_torch.py micro: ns per malloc+free pair
#   record  scripts/record_snapshots.py, then `vramkit verify` on each snapshot
#
# No step stops the others. Each has a time limit, and together they fit in
# GPU_RUN_BUDGET_S seconds (default 540): a step gets at most its own cap and
# never the time the steps after it need to start; record, last, takes what
# is left and records the settings one after another ("default" first).
# Output goes to $OUT (./out/gpu when OUT is unset):
#   log.txt            everything printed
#   results.json       each step's status, time and parsed figures
#   bench.md           device, driver, versions and the tables, for BENCHMARKS.md
#   recorded.tar.gz    the recorded snapshots
# Exit status: 0 when every step chosen passed.
# shellcheck disable=SC2329  # the step_* functions are called as step_$NAME
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
repo="$(cd "$here/../.." && pwd -P)"
cd "$repo" || exit 2
kit="$repo/gpu-kit"
python="${PYTHON:-python3}"
OUT="${OUT:-$repo/out/gpu}"
work="${GPU_RUN_WORK:-${TMPDIR:-/tmp}/vramkit-gpu-run}"
budget="${GPU_RUN_BUDGET_S:-540}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Each process picks its allocator itself; nothing inherited may change it.
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF VRAMKIT_ALLOC_CONF VRAMKIT_DEVICE

ALL_STEPS=(tests smoke pytest bench micro record)
# Per step: the most seconds it gets, and the least worth starting it with.
declare -A CAP=([tests]=150 [smoke]=60 [pytest]=150 [bench]=200 [micro]=150 [record]=300)
declare -A FLOOR=([tests]=20 [smoke]=15 [pytest]=30 [bench]=60 [micro]=30 [record]=60)

now() { date +%s; }
banner() { echo; echo "===== $* ($(date -u +%H:%M:%S))"; }

# ------------------------------------------------------------------ steps
# Each runs as `bash run.sh __step NAME` under `timeout`, with STEP_DEADLINE
# (a Unix time) and PYTHONPATH (the installed wheel) in its environment.

step_tests() {
    local rc=0 name package kind target left r t0
    # The C-program test compiles with $CC, else cc.
    command -v "${CC:-cc}" >/dev/null || { command -v gcc >/dev/null && export CC=gcc; }
    : >"$work/tests.status"
    while read -r name package kind target; do
        case "$name" in '#'* | '') continue ;; esac
        left=$((STEP_DEADLINE - $(now)))
        if [ "$left" -lt 5 ]; then
            echo "---- $name: not run, out of time"
            echo "$name notrun" >>"$work/tests.status"
            rc=1
            continue
        fi
        echo "---- $name ($kind target $target of $package; from crates/$package)"
        t0=$(now)
        (
            cd "$repo/crates/$package" &&
                CARGO_MANIFEST_DIR="$repo/crates/$package" CARGO_PKG_NAME="$package" \
                    timeout -k 5 "$left" "$kit/tests/$name" --test-threads=1 --nocapture
        ) 2>&1 | tee "$work/tests-$name.log"
        r=${PIPESTATUS[0]}
        echo "$name $r $(($(now) - t0))" >>"$work/tests.status"
        [ "$r" = 0 ] || rc=1
    done <"$kit/tests.txt"
    echo "(doc tests are not in the kit: they need cargo and rustdoc)"
    return "$rc"
}

step_smoke() {
    "$python" crates/vramkit-capi/scripts/pytorch_smoke.py "$kit/release/libvramkit_capi.so" 2>&1 | tee "$work/smoke.log"
    return "${PIPESTATUS[0]}"
}

step_pytest() {
    "$python" -m pytest -p no:cacheprovider -v -rfEs bindings/python/tests 2>&1 | tee "$work/pytest.log"
    return "${PIPESTATUS[0]}"
}

# GPU_RUN_DRY_RUN=1: bench and micro print made-up numbers (marked so), to
# check this script and the tables on a machine without a GPU.
dry_run() { [ "${GPU_RUN_DRY_RUN:-0}" = 1 ] && echo --dry-run; }

step_bench() {
    # shellcheck disable=SC2046
    "$python" scripts/gpu/bench_torch.py train --json "$work/train.json" --deadline "$STEP_DEADLINE" $(dry_run)
}

step_micro() {
    # shellcheck disable=SC2046
    "$python" scripts/gpu/bench_torch.py micro --lib "$kit/release/libvramkit_capi.so" \
        --build-dir "$work/ext" --json "$work/micro.json" --deadline "$STEP_DEADLINE" $(dry_run)
}

step_record() {
    local dir="$work/recorded" rc=0 setting left r f name settings
    mkdir -p "$dir" "$work/verify"
    : >"$work/record.status"
    : >"$work/verify.status"
    # The script's own settings, default first; one invocation each, so a
    # run cut short has whole settings.
    settings="$("$python" -c 'import importlib.util as u, sys
s = u.spec_from_file_location("r", "scripts/record_snapshots.py"); m = u.module_from_spec(s); s.loader.exec_module(m)
print(" ".join(m.SETTINGS))')" || { echo "cannot read the settings of scripts/record_snapshots.py"; return 1; }
    for setting in $settings; do
        left=$((STEP_DEADLINE - $(now) - 30)) # 30 s for verify and the tarball
        if [ "$left" -lt 30 ]; then
            echo "---- $setting: not recorded, out of time"
            echo "$setting notrun" >>"$work/record.status"
            rc=1
            continue
        fi
        echo "---- record_snapshots.py --setting $setting"
        timeout -k 5 "$left" "$python" scripts/record_snapshots.py --out "$dir" --setting "$setting"
        r=$?
        echo "$setting $r" >>"$work/record.status"
        [ "$r" = 0 ] || rc=1
    done
    echo "---- vramkit verify"
    for f in "$dir"/*.pickle; do
        [ -e "$f" ] || continue
        name="$(basename "$f")"
        left=$((STEP_DEADLINE - $(now) - 10))
        if [ "$left" -lt 2 ]; then
            echo "$name: not verified, out of time" | tee "$work/verify/$name.txt"
            echo "$name 124" >>"$work/verify.status"
            rc=1
            continue
        fi
        timeout -k 2 "$((left < 60 ? left : 60))" "$kit/release/vramkit" verify "$f" >"$work/verify/$name.txt" 2>&1
        r=$?
        echo "$name $r" >>"$work/verify.status"
        echo "$name (exit $r):"
        sed 's/^/    /' "$work/verify/$name.txt" | head -20
        [ "$r" = 0 ] || rc=1
    done
    rm -f "$OUT"/recorded.tar.*
    tar -czf "$OUT/recorded.tar.gz" -C "$work" recorded
    if [ "$(stat -c %s "$OUT/recorded.tar.gz")" -gt $((15 << 20)) ]; then
        echo "recorded.tar.gz is over 15 MiB: xz instead"
        rm -f "$OUT/recorded.tar.gz"
        tar -cJf "$OUT/recorded.tar.xz" -C "$work" recorded
    fi
    ls -l "$OUT"/recorded.tar.*
    return "$rc"
}

if [ "${1:-}" = "__step" ]; then
    "step_$2"
    exit $?
fi

# ------------------------------------------------------------------ setup

usage() { sed -n '2,/^set -uo/p' "$0" | grep -v '^# shellcheck' | sed '$d; s/^# \{0,1\}//'; }

steps=()
for arg in "$@"; do
    case "$arg" in
        -h | --help) usage; exit 0 ;;
        tests | smoke | pytest | bench | micro | record) steps+=("$arg") ;;
        *) echo "run.sh: unknown step '$arg' (steps: ${ALL_STEPS[*]})" >&2; exit 2 ;;
    esac
done
[ ${#steps[@]} -gt 0 ] || steps=("${ALL_STEPS[@]}")
# In the checklist's order, whatever the order asked.
ordered=()
for s in "${ALL_STEPS[@]}"; do
    for t in "${steps[@]}"; do [ "$s" = "$t" ] && { ordered+=("$s"); break; }; done
done
steps=("${ordered[@]}")

mkdir -p "$OUT"
rm -rf "$work"
mkdir -p "$work"
rm -f "$OUT/log.txt" "$OUT/results.json" "$OUT/bench.md" "$OUT"/recorded.tar.*

selected() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

collect() { "$python" "$here/collect.py" "$work" "$OUT" || echo "collect.py failed (results.json may be stale)"; }

record_step() { # name status rc seconds limit
    printf '%s %s %s %s %s\n' "$@" >>"$work/steps.tsv"
    collect
}

preamble() {
    banner "vramkit GPU run: steps ${steps[*]}; budget ${budget} s; output in $OUT"
    echo "repository: $repo"
    uname -a
    nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
    local c
    for c in "nvcc --version" "g++ --version" "cc --version" "ninja --version" "$python --version" "$python -m pytest --version"; do
        if ! command -v "${c%% *}" >/dev/null; then
            echo "$c: not found"
        elif [ "${c%% *}" = nvcc ]; then
            echo "$c: $($c 2>&1 | grep -i release)"
        else
            echo "$c: $($c 2>&1 | head -n 1)"
        fi
    done
    "$python" - "$work/meta.json" "$kit" <<'EOF'
import json, os, platform, subprocess, sys, time
meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "python": platform.python_version(), "host": platform.node()}
try:
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    if q:
        meta["device"], meta["driver"], meta["memory"] = [x.strip() for x in q[0].split(",")]
except Exception as error:
    meta["nvidia_smi_error"] = str(error)
try:
    import torch
    meta.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        meta.update(torch_device=p.name, capability=f"{p.major}.{p.minor}", multiprocessors=p.multi_processor_count)
except Exception as error:
    meta["torch_error"] = repr(error)
try:
    m = json.load(open(os.path.join(sys.argv[2], "manifest.json")))
    meta.update(kit_commit=m.get("commit"), kit_dirty=m.get("dirty"), kit_built=m.get("built"), kit_rustc=m.get("rustc"))
except Exception as error:
    meta["kit_error"] = repr(error)
json.dump(meta, open(sys.argv[1], "w"), indent=2)
print(json.dumps(meta, indent=2))
EOF
}

# The test executables have this machine's path of the repository where
# prepare.sh ran compiled in (env!("CARGO_MANIFEST_DIR")); make that path
# lead here.
link_baked_path() {
    local baked
    baked="$(cat "$kit/baked_root.txt")"
    if [ "$baked" = "$repo" ] || [ "$(cd "$baked" 2>/dev/null && pwd -P)" = "$repo" ]; then
        echo "baked path $baked: this repository"
    elif [ -L "$baked" ] || [ ! -e "$baked" ]; then
        mkdir -p "$(dirname "$baked")" && ln -sfn "$repo" "$baked" && echo "baked path $baked -> $repo (linked)"
    else
        echo "WARNING: baked path $baked exists and is another folder: the tests read the files there, not this repository's"
        return 1
    fi
}

setup() {
    banner "setup"
    if [ ! -f "$kit/manifest.json" ]; then
        echo "no gpu-kit/ here: run 'bash scripts/gpu/prepare.sh' on the build machine and carry gpu-kit"
        return 1
    fi
    local rc=0 stale
    chmod +x "$kit"/tests/* "$kit"/release/* 2>/dev/null
    # Sources changed since the kit was built: its binaries are stale.
    stale="$(sha256sum -c --quiet "$kit/sources.sha256" 2>/dev/null | sed 's/: FAILED.*//')"
    if [ -n "$stale" ]; then
        echo "WARNING: the kit was built from other sources; these files differ (re-run prepare.sh):"
        echo "$stale" | sed 's/^/    /'
        "$python" - "$work/meta.json" <<EOF
import json, sys
meta = json.load(open(sys.argv[1]))
meta["kit_stale"] = """$stale""".split()
json.dump(meta, open(sys.argv[1], "w"), indent=2)
EOF
    else
        echo "kit matches these sources"
    fi
    link_baked_path || rc=1
    echo "installing $(basename "$kit"/wheels/*.whl) into $work/site"
    if "$python" -m pip install --quiet --no-index --no-deps --no-compile --target "$work/site" "$kit"/wheels/*.whl; then
        export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
        "$python" -c 'import vramkit; print("vramkit", vramkit.__version__, "from", vramkit.__file__)' || rc=1
    else
        echo "the wheel did not install"
        rc=1
    fi
    return "$rc"
}

main() {
    local t0 left reserve later limit rc status step prebuild=""
    local deadline=$(($(now) + budget))
    preamble
    t0=$(now)
    setup
    rc=$?
    record_step setup "$([ $rc = 0 ] && echo pass || echo fail)" "$rc" "$(($(now) - t0))" -
    if selected micro && [ "${GPU_RUN_DRY_RUN:-0}" != 1 ] && "$python" -c 'import torch' 2>/dev/null; then
        # Compile the micro-benchmark's extension while the tests run
        # (CPU only; the micro step waits for it or builds it itself).
        "$python" scripts/gpu/bench_torch.py micro --build-only --build-dir "$work/ext" >"$work/micro-build.log" 2>&1 &
        prebuild=$!
        echo "compiling scripts/gpu/malloc_pair.cpp in the background (pid $prebuild)"
    fi

    local i
    for ((i = 0; i < ${#steps[@]}; i++)); do
        step=${steps[$i]}
        if [ -n "$prebuild" ] && { [ "$step" = bench ] || [ "$step" = micro ]; }; then
            # Not while timing: wait for the compiler (up to 120 s).
            for _ in $(seq 120); do kill -0 "$prebuild" 2>/dev/null || break; sleep 1; done
            wait "$prebuild" 2>/dev/null
            echo "background build of the micro-benchmark exited $?:"
            tail -n 5 "$work/micro-build.log" | sed 's/^/    /'
            prebuild=""
        fi
        reserve=0
        for later in "${steps[@]:$((i + 1))}"; do reserve=$((reserve + FLOOR[$later])); done
        left=$((deadline - $(now) - reserve))
        limit=$((left < CAP[$step] ? left : CAP[$step]))
        if [ "$limit" -lt "${FLOOR[$step]}" ]; then
            banner "$step: skipped, out of time (${limit} s left for it)"
            record_step "$step" "skipped-no-time" - 0 "$limit"
            continue
        fi
        banner "$step (limit ${limit} s)"
        t0=$(now)
        STEP_DEADLINE=$((t0 + limit - 5)) timeout -k 10 "$limit" bash "$0" __step "$step"
        rc=$?
        case $rc in
            0) status=pass ;;
            124 | 137) status=timeout ;;
            *) status=fail ;;
        esac
        echo "===== $step: $status (exit $rc) in $(($(now) - t0)) s"
        record_step "$step" "$status" "$rc" "$(($(now) - t0))" "$limit"
    done

    banner "bench.md"
    cat "$OUT/bench.md"
    banner "summary"
    column -t "$work/steps.tsv" 2>/dev/null || cat "$work/steps.tsv"
    echo "results: $OUT/results.json, $OUT/bench.md, $OUT/log.txt"
    [ "$(awk '$1 != "setup" && $2 != "pass"' "$work/steps.tsv" | wc -l)" = 0 ]
}

main 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
