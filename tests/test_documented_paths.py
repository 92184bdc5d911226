"""Every documented path ends cleanly: a bad value or a bad folder is one line on stderr and exit
status 2, never a traceback; running the documented commands never dirties the checkout."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.cli import main
from profiler.store import ResultStore, load_capture

ROOT = Path(__file__).resolve().parents[1]
NSYS_EXPORT = ROOT / "tests" / "data" / "nsys-h200-n2048" / "profile.sqlite.xz"


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_summary_when_no_implementation_could_run(tmp_path, capsys):
    # On a CPU neither a Triton kernel (without the interpreter) nor cuDNN runs; the table says why.
    assert main(["capture", "--device", "cpu", "--seq", "16", "--impl", "sdpa_cudnn,sdpa_efficient",
                 "--out", str(tmp_path / "cap"), "--rep-ms", "5"]) == 0
    out = capsys.readouterr().out
    assert "unsupported: sdpa_cudnn needs a CUDA device" in out and "unsupported: sdpa_efficient" in out
    _, frame = load_capture(tmp_path / "cap")
    assert set(frame.status) == {"unsupported"}


def test_capture_in_a_dtype_this_machine_has_no_roof_for(tmp_path, capsys, monkeypatch):
    """A CPU measures an fp32 matmul roof only: fp16 rows have no bound, and the summary says '-'."""
    out = tmp_path / "cap"
    assert main(["capture", "--device", "cpu", "--seq", "16", "--dtype", "fp16", "--impl", "naive",
                 "--out", str(out), "--rep-ms", "5"]) == 0
    assert "│ naive " in capsys.readouterr().out
    _, frame = load_capture(out)
    assert frame.bound.isna().all() and (frame.status == "ok").all()
    monkeypatch.setenv("ATTN_REPORTS", str(tmp_path))
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "dashboards" / "roofline.py"), default_timeout=120).run()
    assert not at.exception and any("No roof for this dtype" in w.value for w in at.warning)


@pytest.mark.parametrize("setup,message", [
    (lambda p: p.write_text("x"), "is a file; name a folder"),
    (lambda p: (p.mkdir(), (p / "notes.txt").write_text("mine")), "holds other files and is not a capture"),
    (lambda p: None, None),  # a new folder is fine
])
def test_out_must_be_a_new_or_empty_folder(tmp_path, capsys, setup, message):
    out = tmp_path / "out"
    setup(out)
    code = main(["capture", "--device", "cpu", "--seq", "8", "--impl", "naive", "--out", str(out), "--rep-ms", "2"])
    if message is None:
        assert code == 0
        return
    assert code == 2 and message in _error(capsys)
    assert not (out / "results.parquet").exists()


def test_out_that_cannot_be_written(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["capture", "--device", "cpu", "--seq", "8", "--impl", "naive", "--out", str(blocker / "sub"),
                 "--rep-ms", "2"])
    assert code == 2 and f"--out '{blocker / 'sub'}' cannot be written" in _error(capsys)


def test_resume_into_a_corrupt_capture(tmp_path, capsys):
    out = tmp_path / "cap"
    args = ["capture", "--device", "cpu", "--seq", "8", "--impl", "naive", "--out", str(out), "--rep-ms", "2"]
    assert main(args) == 0
    (out / "results.parquet").write_bytes(b"not parquet")
    assert main([*args, "--resume"]) == 2
    assert "--resume: " in (err := _error(capsys)) and "is not a readable parquet file" in err


def test_resume_replaces_an_error_row_instead_of_adding_one(tmp_path):
    row = {"impl": "naive", "step": "total", "mode": "fwd", "batch": 1, "heads": 1, "seq_q": 8, "seq_kv": 8,
           "head_dim": 16, "dtype": "fp32", "causal": False}
    store = ResultStore(tmp_path, {"command": "a"})
    store.append([row | {"status": "error", "message": "RuntimeError: flaky"}])
    assert not store.has(row)  # an error is measured again on --resume
    store = ResultStore(tmp_path, {"command": "b"}, resume=True)
    store.append([row | {"status": "ok", "time_ms": 1.0}])
    _, frame = load_capture(tmp_path)
    assert len(frame) == 1 and frame.status.iloc[0] == "ok"


def test_cpu_out_of_memory_is_oom_not_error(monkeypatch):
    from attention_core.shape import Shape
    from profiler.measure import runner
    from profiler.registry import REGISTRY

    def too_big(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(runner, "make_inputs", too_big)
    result = runner.run_case(REGISTRY["naive"], Shape.square(1, 1, 8, 16, dtype="fp32"), "cpu")
    assert result.status == "oom" and "can't allocate memory" in result.message
    monkeypatch.setattr(runner, "make_inputs", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    assert runner.run_case(REGISTRY["naive"], Shape.square(1, 1, 8, 16, dtype="fp32"), "cpu").status == "oom"


def test_truncated_nsys_export_names_the_users_file(tmp_path, capsys):
    truncated = tmp_path / "cut.sqlite.xz"
    truncated.write_bytes(NSYS_EXPORT.read_bytes()[:4000])
    assert main(["nsys", "summarize", str(truncated)]) == 2
    err = _error(capsys)
    assert f"'{truncated}' is not a readable .xz file" in err and "/nsys-" not in err  # not the temporary copy


def test_validate_rebuild_writes_a_copy_unless_in_place(tmp_path, capsys):
    shipped = ROOT / "reports" / "validate-h200-n2048"
    before = {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()}
    out = tmp_path / "rebuilt"
    assert main(["validate", "--rebuild", str(shipped), "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()} == before
    assert json.loads((out / "meta.json").read_text())["rebuilt_from"] == str(shipped)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "validation.parquet"),
                                  pd.read_parquet(shipped / "validation.parquet"))
    capsys.readouterr()
    assert main(["validate", "--rebuild", str(shipped), "--out", str(out), "--in-place"]) == 2
    assert "exclude each other" in _error(capsys)


def test_documented_commands_leave_the_checkout_clean(tmp_path):
    """`make demo`'s default folder and report.html are ignored by git; shipped folders stay put."""
    ignored = subprocess.run(["git", "check-ignore", "reports/cpu-x86-64-2-threads-20261122-101010/results.parquet",
                              "reports/reference-h200/report.html"], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == ["reports/cpu-x86-64-2-threads-20261122-101010/results.parquet",
                                      "reports/reference-h200/report.html"]
    kept = subprocess.run(["git", "check-ignore", "reports/reference-h200/results.parquet"], cwd=ROOT,
                          capture_output=True, text=True)
    assert kept.returncode == 1  # shipped captures are tracked
    # The README's `sweep ... --out reports/my-sweep` (any capture a user names under reports/) is theirs too.
    for path in ("reports/my-sweep/results.parquet", "reports/my-sweep/parts/rank-0.parquet"):
        assert subprocess.run(["git", "check-ignore", path], cwd=ROOT, capture_output=True).returncode == 0, path
    # Every shipped folder stays visible to git (a new one is named in .gitignore).
    tracked = subprocess.run(["git", "ls-files", "reports"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    folders = sorted({p.split("/")[1] for p in tracked})
    assert len(folders) >= 10
    for name in folders:
        probe = f"reports/{name}/results.parquet"
        assert subprocess.run(["git", "check-ignore", probe], cwd=ROOT, capture_output=True).returncode == 1, name
    from profiler.measure.folder import default_folder

    assert subprocess.run(["git", "check-ignore", str(default_folder("NVIDIA H200") / "meta.json")], cwd=ROOT,
                          capture_output=True).returncode == 0


def test_nsys_script_uses_the_venv_python():
    script = (ROOT / "scripts" / "nsys_profile.sh").read_text()
    assert 'PYTHON=.venv/bin/python' in script and "PYTHON:-" in script
    assert shutil.which("bash")


# ------------------------------------------------------------------------------ a fuzz of the CLI

WORDS = ["capture", "sweep", "bench", "model", "remodel", "report", "nsys", "summarize", "ingest", "validate",
         "ceilings", "stalls", "--top", "--seq", "--batch", "--heads", "--dim", "--dtype", "--causal", "--mode",
         "--impl", "--out",
         "--resume", "--rebuild", "--in-place", "--json", "--dry-run", "--device", "--tokens", "--baseline",
         "--device-name", "--list-devices", "--rep-ms", "--trace", "--reason",
         "0", "-1", "1", "8", "x", "1,,2", "fp8", "fp16", "both", "maybe", "naive", "flash9", "all", "cpu", "cuda",
         "H200", "Z80", "nowhere", "mod:fn", "fwd", "train", "torch", "OUT", "SHIPPED", "FILE", "UNWRITABLE", ""]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=7))
def test_no_argument_list_ends_in_a_traceback(tmp_path, monkeypatch, argv):
    """Whatever the arguments, the CLI returns 0 or 2 (or argparse's own exit), never raises. The
    measuring loop and the ceilings are replaced by stand-ins so a valid capture ends at once."""
    from profiler.measure import cases, folder
    from profiler.model.roofs import Ceilings

    monkeypatch.chdir(tmp_path)  # default folders (reports/<device>-<time>) land here, not in the checkout
    shipped = tmp_path / "shipped"
    if not shipped.exists():  # a copy: commands may write into the folder they are given
        shutil.copytree(ROOT / "reports" / "validate-h200-n2048", shipped)
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setattr(cases, "measure_cases", lambda *a, **k: [])
    monkeypatch.setattr(folder, "measure_ceilings", lambda device, dtypes=(): Ceilings(
        "CPU", {"fp32": 1.0}, 10.0, 8, 8, "x", "now"))
    swap = {"OUT": str(tmp_path / "out"), "SHIPPED": str(shipped), "FILE": str(NSYS_EXPORT),
            "UNWRITABLE": str(tmp_path / "a-file" / "sub")}
    args = [swap.get(w, w) for w in argv]
    try:
        code = main(args)
    except SystemExit as stop:  # argparse: --help, or a usage error
        code = stop.code
    assert code in (0, 2)


def test_the_install_section_gets_the_cpu_build_of_torch_before_the_wheel():
    """Issue 41 defect 2: on a CPU machine `pip install "...whl[dashboard]"` pulled CUDA torch and its NVIDIA
    libraries (5.9 GB) and the README did not say how to avoid it. It must say so, in that order: the CPU build
    first, from PyTorch's CPU index, then the wheel, whose torch requirement that build satisfies."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Install as a package"):readme.index("## Usage")]
    cpu = section.index("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    assert cpu < section.index('pip install "attention_roofline-0.1.0-py3-none-any.whl[dashboard]"')
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'version = "0.1.0"' in pyproject  # the wheel's name in the README
