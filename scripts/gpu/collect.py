#!/usr/bin/env python3
"""Gathers what scripts/gpu/run.sh left in its work folder into
<out>/results.json (every step's status and parsed figures) and
<out>/bench.md (the tables, ready for BENCHMARKS.md). run.sh calls it after
every step, so a run cut short still leaves what it had.

    python3 scripts/gpu/collect.py WORK_DIR OUT_DIR
"""

import glob
import importlib.util
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def read(path, default=None):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def read_json(path):
    text = read(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        return {"unreadable": f"{path}: {error}"}


def table(path):
    """Whitespace-separated lines, '#' comments left out."""
    rows = []
    for line in (read(path) or "").splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(line.split())
    return rows


def parse_libtest(log):
    out = {"passed": 0, "failed": 0, "ignored": 0, "result_lines": [], "failures": [], "skipped": []}
    lines = log.splitlines()
    for line in lines:
        m = re.search(r"test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored", line)
        if m:
            out["result_lines"].append(line.strip())
            out["passed"] += int(m.group(2))
            out["failed"] += int(m.group(3))
            out["ignored"] += int(m.group(4))
        m = re.search(r"\bskipped\b.*", line)
        if m and "test result" not in line:
            test = re.match(r"test (\S+) \.\.\. ", line)
            out["skipped"].append((f"{test.group(1)}: " if test else "") + m.group(0).strip())
    # The names under the last "failures:" heading (the second list libtest prints).
    for i in [i for i, line in enumerate(lines) if line.strip() == "failures:"][-1:]:
        for line in lines[i + 1:]:
            if not line.startswith("    "):
                break
            out["failures"].append(line.strip())
    return out


def collect_tests(work):
    binaries = {}
    for row in table(os.path.join(work, "tests.status")):
        name, rc, seconds = row[0], row[1], row[2] if len(row) > 2 else None
        log = read(os.path.join(work, f"tests-{name}.log"), "")
        entry = parse_libtest(log)
        entry.update(rc=None if rc == "notrun" else int(rc), seconds=None if seconds is None else int(seconds))
        if rc == "notrun":
            entry["error"] = "not run: out of time"
        binaries[name] = entry
    if not binaries:
        return None
    total = {k: sum(b[k] for b in binaries.values()) for k in ("passed", "failed", "ignored")}
    total["skipped_lines"] = sum(len(b["skipped"]) for b in binaries.values())
    return {"binaries": binaries, "total": total}


def collect_smoke(work):
    log = read(os.path.join(work, "smoke.log"))
    if log is None:
        return None
    line = next((l for l in log.splitlines() if l.startswith("allocations:")), None)
    return {"ok_line": "PYTORCH SMOKE OK" in log, "stats_line": line, "tail": log.splitlines()[-5:]}


def collect_pytest(work):
    log = read(os.path.join(work, "pytest.log"))
    if log is None:
        return None
    summary = None
    for line in log.splitlines():
        m = re.match(r"^=+ (.+) in [\d.]+s", line)
        if m:
            summary = m.group(1)
    counts = {}
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)", summary or ""):
        counts[word] = int(number)
    return {
        "summary": summary,
        "counts": counts,
        "skipped": [l.strip() for l in log.splitlines() if l.startswith("SKIPPED")],
        "failed": [l.strip() for l in log.splitlines() if l.startswith(("FAILED", "ERROR"))],
    }


VERIFY_LINE = re.compile(
    r"device (?P<device>\d+): (?P<placed>\d+)/(?P<allocations>\d+) allocations placed .*\((?P<percent>[\d.]+)%\), "
    r"segment events (?P<segment_events>\w+) \((?P<segments_recorded>\d+) recorded, (?P<segments_predicted>\d+) predicted\), "
    r"end state (?P<end_state>\w+)"
)


def parse_verify(text):
    """The per-device lines of `vramkit verify`."""
    return [m.groupdict() for m in map(VERIFY_LINE.match, text.splitlines()) if m]


def collect_record(work, out_dir):
    status = table(os.path.join(work, "record.status"))
    if not status and not os.path.exists(os.path.join(work, "recorded")):
        return None
    files = sorted(glob.glob(os.path.join(work, "recorded", "*.pickle")))
    verify = {}
    for row in table(os.path.join(work, "verify.status")):
        name, rc = row[0], int(row[1])
        text = read(os.path.join(work, "verify", name + ".txt"), "")
        verify[name] = {"rc": rc, "lines": text.splitlines()[:20], "devices": parse_verify(text)}
    tarballs = {os.path.basename(p): os.path.getsize(p) for p in glob.glob(os.path.join(out_dir, "recorded.tar.*"))}
    return {
        "settings": {row[0]: (row[1] if len(row) > 1 else None) for row in status},
        "snapshots": {os.path.basename(p): os.path.getsize(p) for p in files},
        "verify": verify,
        "verify_passed": sum(1 for v in verify.values() if v["rc"] == 0),
        "verify_failed": sum(1 for v in verify.values() if v["rc"] != 0),
        "tarball": tarballs,
    }


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_torch", os.path.join(HERE, "bench_torch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def markdown(results):
    meta = results.get("meta") or {}
    lines = [f"## On a GPU: {meta.get('device', 'unknown device')} (scripts/gpu/run.sh)", ""]
    facts = [
        ("date (UTC)", meta.get("date")),
        ("device", f"{meta.get('device')} ({meta.get('memory')})" if meta.get("memory") else meta.get("device")),
        ("driver", meta.get("driver")),
        ("PyTorch", f"{meta.get('torch')} (CUDA {meta.get('cuda')})" if meta.get("torch") else None),
        ("Python", meta.get("python")),
        ("vramkit", f"kit built from {meta.get('kit_commit', '?')[:12]}{' (dirty)' if meta.get('kit_dirty') else ''} on {meta.get('kit_built')}"),
    ]
    for name, value in facts:
        if value:
            lines.append(f"- {name}: {value}")
    if meta.get("kit_stale"):
        lines.append(f"- WARNING: the kit is older than these sources ({len(meta['kit_stale'])} files differ)")
    lines += ["", "| step | status | seconds |", "| --- | --- | ---: |"]
    for name, step in results.get("steps", {}).items():
        lines.append(f"| {name} | {step['status']} | {step.get('seconds', '')} |")
    bench = None
    if results.get("train") or results.get("micro"):
        try:
            bench = load_bench()
        except Exception as error:  # the tables are a convenience; results.json has the numbers
            lines += ["", f"(tables unavailable: {error})"]
    if bench and results.get("train"):
        lines += ["", "### Training steps", "", bench.train_markdown(results["train"])]
    if bench and results.get("micro"):
        lines += ["", "### malloc+free pairs", "", bench.micro_markdown(results["micro"])]
    record = results.get("record")
    if record and record.get("verify"):
        lines += [
            "",
            "### vramkit verify on the recorded snapshots",
            "",
            f"{record['verify_passed']} passed, {record['verify_failed']} did not, of {len(record['verify'])} snapshots.",
            "",
            "| snapshot | verify | allocations placed as PyTorch | segment events (recorded/predicted) | end state |",
            "| --- | --- | ---: | --- | --- |",
        ]
        for name, v in record["verify"].items():
            verdict = "PASS" if v["rc"] == 0 else f"exit {v['rc']}"
            devices = v.get("devices") or []
            if not devices:
                first = (v["lines"] or [""])[0].replace("|", "/")
                lines.append(f"| {name} | {verdict} | {first} | | |")
            for d in devices:
                lines.append(
                    f"| {name}{'' if len(devices) == 1 else ' (device %s)' % d['device']} | {verdict} "
                    f"| {d['placed']}/{d['allocations']} ({d['percent']}%) "
                    f"| {d['segment_events']} ({d['segments_recorded']}/{d['segments_predicted']}) | {d['end_state']} |"
                )
    return "\n".join(lines) + "\n"


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    results = {"meta": read_json(os.path.join(work, "meta.json")) or {}, "steps": {}}
    for row in table(os.path.join(work, "steps.tsv")):
        name, status, rc, seconds, limit = (row + [None] * 5)[:5]
        results["steps"][name] = {
            "status": status,
            "rc": None if rc in (None, "-") else int(rc),
            "seconds": None if seconds in (None, "-") else int(seconds),
            "limit_s": None if limit in (None, "-") else int(limit),
        }
    parts = {
        "tests": collect_tests(work),
        "smoke": collect_smoke(work),
        "pytest": collect_pytest(work),
        "train": read_json(os.path.join(work, "train.json")),
        "micro": read_json(os.path.join(work, "micro.json")),
        "record": collect_record(work, out_dir),
    }
    results.update({k: v for k, v in parts.items() if v is not None})
    results["summary"] = {
        "passed": [n for n, s in results["steps"].items() if s["status"] == "pass"],
        "not_passed": [n for n, s in results["steps"].items() if s["status"] != "pass"],
    }
    for name, text in (("results.json", json.dumps(results, indent=2)), ("bench.md", markdown(results))):
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out_dir, name))


if __name__ == "__main__":
    main()
