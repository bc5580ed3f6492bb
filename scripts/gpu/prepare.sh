#!/usr/bin/env bash
# Builds the GPU kit: everything scripts/gpu/run.sh needs on a GPU machine
# that has no network and maybe no Rust toolchain, into the git-ignored
# folder gpu-kit/ at the repository root.
#
#   bash scripts/gpu/prepare.sh
#
# Run it on an x86-64 Linux machine with cargo (and network access the
# first time, for crates and for maturin from PyPI), in the checkout whose
# working tree the GPU machine will receive. It is idempotent: cargo and
# maturin rebuild only what changed, and gpu-kit/ is made anew each time.
#
# gpu-kit/
#   tests/            the test executables of `cargo test -p vramkit-cuda
#                     -p vramkit-capi` (debug info stripped), beside the
#                     libvramkit_capi.so those tests were built with (the
#                     C-program test looks for it next to the executable)
#   tests.txt         one line per executable: kit name, package, target
#   release/          libvramkit_capi.so and the vramkit CLI, release builds
#   wheels/           the abi3 wheel of the vramkit Python package
#   baked_root.txt    the workspace path compiled into the test executables
#                     (env!("CARGO_MANIFEST_DIR")); run.sh links it to the
#                     repository copy on the GPU machine
#   sources.sha256    the sources the kit was built from (run.sh warns
#                     when the repository there differs: a stale kit)
#   manifest.json     what was built, from which commit, with which tools
#
# Environment: CARGO_TARGET_DIR (default <repo>/target), PYTHON (python3),
# MATURIN (a maturin to use; otherwise one on PATH, else one installed into
# <target>/maturin-venv), GPU_KIT_LIMIT_MIB (50): fail above this size.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
repo="$(cd "$here/../.." && pwd -P)"
cd "$repo"
kit="$repo/gpu-kit"
target="${CARGO_TARGET_DIR:-$repo/target}"
export CARGO_TARGET_DIR="$target"
python="${PYTHON:-python3}"
limit_mib="${GPU_KIT_LIMIT_MIB:-50}"
start=$SECONDS

work="$(mktemp -d "${TMPDIR:-/tmp}/vramkit-gpu-kit.XXXXXX")"
trap 'rm -rf "$work"' EXIT

rm -rf "$kit"
mkdir -p "$kit/tests" "$kit/release" "$kit/wheels"

echo "== test executables: cargo test -p vramkit-cuda -p vramkit-capi --no-run"
cargo test -p vramkit-cuda -p vramkit-capi --no-run --message-format=json >"$work/tests.json"

# Picks the test executables, the cdylib the capi tests link against, and
# the workspace root the executables have compiled in, from cargo's JSON.
"$python" - "$work/tests.json" "$kit" >"$work/copy.tsv" <<'EOF'
import json, os, sys

messages, kit = sys.argv[1], sys.argv[2]
tests, cdylib, roots = [], None, set()
for line in open(messages):
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact":
        continue
    crate_dir = os.path.dirname(m["manifest_path"])
    package = os.path.basename(crate_dir)
    if m.get("executable") and m["profile"]["test"]:
        kind = "lib" if "lib" in m["target"]["kind"] or "cdylib" in m["target"]["kind"] else m["target"]["kind"][0]
        name = f"{package}-{kind}" if kind == "lib" else f"{package}-{m['target']['name']}"
        tests.append((name, package, kind, m["target"]["name"], m["executable"]))
        # <root>/crates/<package>/Cargo.toml
        roots.add(os.path.dirname(os.path.dirname(crate_dir)))
    elif package == "vramkit-capi" and "cdylib" in m["target"]["kind"] and not m["profile"]["test"]:
        cdylib = next(f for f in m["filenames"] if f.endswith(".so"))
if len(tests) != 4 or cdylib is None or len(roots) != 1:
    sys.exit(f"unexpected cargo output: tests {tests}, cdylib {cdylib}, roots {roots}")
with open(os.path.join(kit, "tests.txt"), "w") as f:
    f.write("# kit-name package target-kind target-name (run from crates/<package>, as cargo does)\n")
    for name, package, kind, target, _ in tests:
        f.write(f"{name} {package} {kind} {target}\n")
with open(os.path.join(kit, "baked_root.txt"), "w") as f:
    f.write(roots.pop() + "\n")
for name, _, _, _, exe in tests:
    print(f"{exe}\ttests/{name}")
print(f"{cdylib}\ttests/libvramkit_capi.so")
EOF

echo "== release builds: libvramkit_capi.so, the vramkit CLI"
cargo build --release -p vramkit-capi
cargo build --release -p vramkit-cli
printf '%s\t%s\n' "$target/release/libvramkit_capi.so" release/libvramkit_capi.so "$target/release/vramkit" release/vramkit >>"$work/copy.tsv"

while IFS=$'\t' read -r from to; do
    cp "$from" "$kit/$to"
    # Debug info only: symbol names stay for backtraces, and the shared
    # objects keep their dynamic symbols (dlsym, nm -D).
    strip --strip-debug "$kit/$to"
done <"$work/copy.tsv"

echo "== the abi3 wheel (maturin)"
maturin="${MATURIN:-}"
if [ -z "$maturin" ]; then
    if command -v maturin >/dev/null; then
        maturin="$(command -v maturin)"
    else
        if [ ! -x "$target/maturin-venv/bin/maturin" ]; then
            "$python" -m venv "$target/maturin-venv"
            "$target/maturin-venv/bin/python" -m pip install --quiet --disable-pip-version-check 'maturin>=1.9.4,<2'
        fi
        maturin="$target/maturin-venv/bin/maturin"
    fi
fi
# The extension keeps its own workspace and target folder, as ci.sh does.
CARGO_TARGET_DIR="${VRAMKIT_PY_TARGET_DIR:-$target/python}" \
    "$maturin" build --release --strip --manifest-path bindings/python/Cargo.toml --out "$kit/wheels"

baked="$(cat "$kit/baked_root.txt")"
echo "== checks"
grep -aq "$baked/crates/vramkit-capi" "$kit/tests/vramkit-capi-tests" ||
    { echo "prepare.sh: the capi tests do not name $baked/crates/vramkit-capi; cannot tell the baked path" >&2; exit 1; }
nm -D --defined-only "$kit/release/libvramkit_capi.so" | grep -q ' vramkit_malloc$' ||
    { echo "prepare.sh: the release library lost vramkit_malloc" >&2; exit 1; }
"$kit/release/vramkit" --version
[ "$(find "$kit/wheels" -name '*.whl' | wc -l)" = 1 ] || { echo "prepare.sh: expected one wheel" >&2; exit 1; }

# What the kit was built from, checked by run.sh on the GPU machine (which
# may have no git): every tracked file the builds read.
git ls-files -z -- Cargo.toml Cargo.lock crates bindings/python |
    xargs -0 sha256sum >"$kit/sources.sha256"

"$python" - "$kit" "$repo" <<'EOF'
import hashlib, json, os, platform, subprocess, sys, time

kit, repo = sys.argv[1], sys.argv[2]
def out(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=repo).stdout.strip()
    except OSError:
        return ""
files = {}
for folder, _, names in os.walk(kit):
    for name in sorted(names):
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, kit)
        if rel == "manifest.json":
            continue
        data = open(path, "rb").read()
        files[rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
manifest = {
    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "commit": out("git", "rev-parse", "HEAD"),
    "dirty": bool(out("git", "status", "--porcelain", "--untracked-files=no")),
    "rustc": out("rustc", "--version"),
    "cargo": out("cargo", "--version"),
    "host": f"{platform.machine()} {platform.system()} glibc {platform.libc_ver()[1]}",
    "baked_root": open(os.path.join(kit, "baked_root.txt")).read().strip(),
    "files": dict(sorted(files.items())),
}
json.dump(manifest, open(os.path.join(kit, "manifest.json"), "w"), indent=2)
print(f"commit {manifest['commit'][:12]}{' (dirty)' if manifest['dirty'] else ''}, {manifest['rustc']}")
for rel, f in manifest["files"].items():
    print(f"  {f['bytes'] / 2**20:8.2f} MiB  {rel}")
EOF

kit_bytes="$(du -sb "$kit" | cut -f1)"
tree_bytes="$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)"
kit_mib=$(( (kit_bytes + (1 << 20) - 1) >> 20 ))
echo "== gpu-kit: $kit_mib MiB ($kit_bytes bytes); tracked tree $(( tree_bytes >> 20 )) MiB; together $(( (kit_bytes + tree_bytes) >> 20 )) MiB of the 64 MiB a device call carries"
echo "   baked path: $baked (run.sh links it to the repository copy there)"
if [ "$kit_mib" -gt "$limit_mib" ]; then
    echo "prepare.sh: gpu-kit is $kit_mib MiB, over the $limit_mib MiB limit" >&2
    exit 1
fi
echo "== prepare.sh done in $((SECONDS - start)) s; carry [\"gpu-kit\"], run: bash scripts/gpu/run.sh"
