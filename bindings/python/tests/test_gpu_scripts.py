"""scripts/gpu/bench_torch.py measures on a GPU only; its --dry-run fills
the same tables and JSON with made-up numbers, so the formatting a GPU
session depends on is checked here, without torch."""

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "gpu" / "bench_torch.py"


def dry_run(mode, tmp_path):
    out = tmp_path / f"{mode}.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), mode, "--dry-run", "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DRY RUN: made-up numbers" in result.stdout, result.stdout
    return result.stdout, json.loads(out.read_text())


def test_train_dry_run_has_a_row_per_workload_and_allocator(tmp_path):
    text, data = dry_run("train", tmp_path)
    rows = [l for l in text.splitlines() if l.startswith("| ") and "---" not in l and "workload" not in l]
    workloads = {r.split("|")[1].strip() for r in rows}
    assert workloads == {"gpt2", "resnet", "unet"}, rows
    assert len(rows) == 12, rows
    assert data, data


def test_micro_dry_run_compares_pytorch_and_vramkit(tmp_path):
    text, data = dry_run("micro", tmp_path)
    assert "vramkit_malloc/vramkit_free" in text and "raw_alloc/raw_delete" in text
    rows = [l for l in text.splitlines() if l.startswith("| ") and (" B |" in l or " MiB |" in l)]
    assert len(rows) >= 3, text
    assert data, data
