"""The `vramkit` command pip installs with the package: the CLI's own binary
(built from crates/vramkit-cli when the wheel is built), so it has every
subcommand the CLI has and answers as the Python functions do."""

import json
import os
import re
import stat
import sys

import pytest

import vramkit
from conftest import REAL_TRACE, REPO, run_command, vramkit_command


def cli_subcommands():
    """The subcommands `crates/vramkit-cli/src/cli.rs` declares (clap names
    each variant of `enum Command` in kebab case)."""
    source = (REPO / "crates" / "vramkit-cli" / "src" / "cli.rs").read_text()
    body = re.search(r"pub enum Command \{(.*?)\n\}", source, re.S).group(1)
    variants = re.findall(r"^\s+([A-Z]\w*)\(", body, re.M)
    return [re.sub(r"(?<!^)([A-Z])", r"-\1", v).lower() for v in variants]


def json_of(args):
    result = run_command(args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_console_script_starts_the_binary_shipped_in_the_package():
    binary = os.path.join(os.path.dirname(vramkit.__file__), "_bin", "vramkit")
    assert os.stat(binary).st_mode & stat.S_IXUSR
    assert vramkit._command.executable() == binary
    # The console script is Python, the binary an ELF file it becomes.
    with open(vramkit_command(), "rb") as script, open(binary, "rb") as elf:
        assert script.read(2) == b"#!" and elf.read(4) == b"\x7fELF"
    version = run_command(["--version"])
    assert version.returncode == 0 and version.stdout.split() == ["vramkit", vramkit.__version__], version


def test_every_subcommand_the_cli_declares_is_there():
    names = cli_subcommands()
    assert {"summary", "replay", "verify", "convert", "tune", "doctor", "report"} <= set(names), names
    listed = run_command(["--help"])
    assert listed.returncode == 0, listed.stderr
    shown = re.findall(r"^  (\S+)", listed.stdout.split("Commands:")[1].split("Options:")[0], re.M)
    assert sorted(set(shown) - {"help"}) == sorted(names), listed.stdout
    for name in names:
        result = run_command([name, "--help"])
        assert result.returncode == 0 and "Usage: vramkit " + name in result.stdout, (name, result.stderr)


def test_the_snapshot_tools_answer_as_the_python_functions_do(tmp_path):
    trace = str(REAL_TRACE)
    tune = json_of(["tune", "--json", trace])
    assert tune["recommended"] == vramkit.tune(trace)["results"][0]["recommended"]
    replay = json_of(["replay", "--json", trace])
    predicted = vramkit.replay(trace)["devices"][0]["predicted"]
    assert replay["peak_reserved_bytes"] == predicted["peak_reserved_bytes"] > 0
    verify = json_of(["verify", "--json", trace])
    assert verify["match_rate"] == 1.0 and verify["placed_same"] == vramkit.verify(trace)["devices"][0]["placed_same"] > 0
    assert run_command(["verify", trace]).stdout.rstrip().endswith("verify: PASS")
    doctor = json_of(["doctor", "--json", trace])
    assert doctor["memory"] == vramkit.doctor(trace)["devices"][0]["memory"]

    converted = tmp_path / "trace.json"
    assert run_command(["convert", trace, converted]).returncode == 0
    summaries = [run_command(["summary", path]) for path in (trace, converted)]
    assert summaries[0].returncode == 0 and "PyTorch CUDA memory summary" in summaries[0].stdout
    assert summaries[0].stdout == summaries[1].stdout, "the JSON form is the same snapshot"

    page = tmp_path / "report.html"
    result = run_command(["report", "-o", page, trace])
    assert result.returncode == 0, result.stderr
    assert page.read_text().startswith("<!DOCTYPE html>") and tune["recommended"] in page.read_text()


def test_bad_input_exits_2_and_names_it(tmp_path):
    missing = tmp_path / "missing.pickle"
    result = run_command(["doctor", missing])
    assert result.returncode == 2 and str(missing) in result.stderr, result.stderr
    result = run_command(["replay", "--conf", "max_split_size_mb:1", REAL_TRACE])
    assert result.returncode == 2 and "max_split_size_mb" in result.stderr, result.stderr


def test_a_package_without_its_binary_says_how_to_repair_it(python):
    result = python(
        """
        import sys, vramkit._command as command
        command._PACKAGE = "/nonexistent"
        sys.argv = ["vramkit", "--help"]
        command.main()
        """
    )
    assert result.returncode == 2, result
    assert "/nonexistent/_bin/vramkit is missing" in result.stderr and "pip install --force-reinstall" in result.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="the package ships Linux binaries")
def test_the_simulated_stacks_ship_as_plain_files_of_both_cuda_majors():
    shipped = os.path.join(os.path.dirname(vramkit.__file__), "_simgpu")
    assert sorted(os.listdir(shipped)) == ["cuda12", "cuda13"]
    for major in (12, 13):
        lib = os.path.join(shipped, f"cuda{major}", "lib")
        names = os.listdir(lib)
        assert f"libcudart.so.{major}" in names and "libcudnn.so.9" in names and f"libcublas.so.{major}" in names
        # A wheel holds no links: the runtime's other names are made when installed.
        assert "libcuda.so.1" not in names
        assert all(os.path.isfile(os.path.join(lib, n)) and not os.path.islink(os.path.join(lib, n)) for n in names)
        assert len(open(os.path.join(shipped, f"cuda{major}", "stamp")).read().strip()) == 16
