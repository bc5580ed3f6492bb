#!/usr/bin/env bash
# Renders `vramkit report` pages in headless Chromium and checks them:
# the page loads with no console error and no network request, the charts
# are there with data, and a screenshot is written.
#
#   scripts/check_report.sh [SNAPSHOT...]
#
# Defaults to a trace with events and a state-only one from data/traces.
# VRAMKIT: the binary (default: builds target/release/vramkit).
# SCREENSHOT_DIR: where screenshots go (default: a fresh directory under /tmp).
# Needs `chromium` (Debian: apt-get install -y chromium); exits 0 with a
# note when it is missing and REQUIRE_CHROMIUM is unset.
set -euo pipefail
cd "$(dirname "$0")/.."

CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [[ -z "$CHROMIUM" ]]; then
    echo "check_report: no chromium found; skipped" >&2
    [[ -n "${REQUIRE_CHROMIUM:-}" ]] && exit 1
    exit 0
fi
if [[ -z "${VRAMKIT:-}" ]]; then
    cargo build --release -q -p vramkit-cli
    VRAMKIT=${CARGO_TARGET_DIR:-target}/release/vramkit
fi
if [[ $# -eq 0 ]]; then
    set -- data/traces/pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle \
           data/traces/pytorch_snapshots/verl__mem.pickle
fi
work=$(mktemp -d /tmp/vramkit-report-check.XXXXXX)
shots=${SCREENSHOT_DIR:-$work}
mkdir -p "$shots"
failed=0

render() { # page, extra chromium arguments...
    local page=$1; shift
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$(mktemp -d "$work/profile.XXXXXX")" --window-size=1400,2400 \
        --enable-logging=stderr --v=0 "$@" "file://$page"
}

for snapshot in "$@"; do
    name=$(basename "$snapshot"); name=${name%.*}
    page="$work/$name.html"
    "$VRAMKIT" report "$snapshot" -o "$page" >/dev/null
    render "$page" --dump-dom >"$work/$name.dom" 2>"$work/$name.log"
    render "$page" --screenshot="$shots/$name.png" >/dev/null 2>>"$work/$name.log"

    problems=()
    # Console messages (the page has no script, so any is an error) and
    # failed loads; and no reference to anything outside the file.
    if grep -E 'Uncaught|:CONSOLE|net::ERR_' "$work/$name.log" >/dev/null; then
        problems+=("console messages or failed loads: $(grep -E 'Uncaught|:CONSOLE|net::ERR_' "$work/$name.log" | head -5)")
    fi
    if sed 's#http://www.w3.org/2000/svg##g' "$page" | grep -Eq 'https?://|src=|<link|@import|url\('; then
        problems+=("the page refers to something outside itself")
    fi
    grep -q '</html>' "$work/$name.dom" || problems+=("the page did not load")
    grep -q '<script' "$work/$name.dom" && problems+=("the page has a script")
    grep -Eq '<svg id="segment-map-recorded"[^>]*data-segments="[1-9]' "$work/$name.dom" || problems+=("no segment map with segments")
    grep -Eq '<rect x="[0-9]+" y="[0-9.]+" width="[1-9]' "$work/$name.dom" || problems+=("the segment map draws nothing")
    if grep -q 'class="note">The snapshot holds no allocation events' "$work/$name.dom"; then
        kind="state only"
    else
        kind="with events"
        grep -Eq '<svg id="timeline"[^>]*data-points="[1-9]' "$work/$name.dom" || problems+=("no timeline chart with points")
        grep -Eq '<polyline class="series"[^>]*data-points="[1-9][0-9]*"[^>]*points="[0-9]' "$work/$name.dom" || problems+=("no chart line with data")
        grep -q '<section id="tune"><h2>Settings tried</h2><table>' "$work/$name.dom" || problems+=("no tune table")
    fi
    [[ -s "$shots/$name.png" ]] || problems+=("no screenshot")
    if [[ ${#problems[@]} -eq 0 ]]; then
        echo "ok   $name ($kind): $(grep -o '<polyline' "$work/$name.dom" | wc -l) lines, $(grep -o '<rect' "$work/$name.dom" | wc -l) rects; screenshot $shots/$name.png"
    else
        failed=1
        for p in "${problems[@]}"; do echo "FAIL $name: $p"; done
    fi
done
exit $failed
