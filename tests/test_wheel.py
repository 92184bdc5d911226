"""The wheel, as a user gets it: built from the checkout, installed into a fresh venv outside it, its
console script run from a folder that is not the checkout (issue 24: `pip wheel .` once held 3 files,
and `pip install .` gave a CLI that failed on import).

Nothing is downloaded. pip builds without isolation (setuptools is in the test's environment) and
installs with --no-deps --no-index. The fresh venv reuses the dependencies of the interpreter running
the tests (torch, triton, pandas...) through a .pth file listing its site-packages folders: site.py
appends a plain path line of a .pth to sys.path without reading that folder's own .pth files, so the
checkout's editable install there stays out of sight (test_the_venv_imports_the_installed_package
checks it).
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from attention_core.shape import NAIVE_STEPS
from profiler.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("attention_core", "kernels", "profiler")  # [tool.setuptools.packages.find] include
SCRIPT = "attention-roofline"
# What a build writes or a developer keeps in a checkout, and no wheel should hold
NOT_SOURCE = (".git", ".venv", "venv", ".tox", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
              ".pytest_cache", ".ruff_cache", ".hypothesis")


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _checkout_files() -> set[str]:
    """Every file of the three packages in the checkout, as a wheel names it."""
    return {p.relative_to(ROOT).as_posix() for package in PACKAGES for p in (ROOT / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _dependency_dirs() -> list[str]:
    """The site-packages folders of the interpreter running the tests: its own (sysconfig) and, for a
    venv made with --system-site-packages as `make setup` makes it, the base interpreter's."""
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def _clean_env(**extra: str) -> dict:
    """This environment without anything that would show Python the checkout or git another repository."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV") and not k.startswith("GIT_")}
    return {**env, "PYTHONNOUSERSITE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of the checkout: pip builds in the source tree (build/, *.egg-info), and a
    stale build/lib there would lend the wheel modules the checkout no longer has. reports/ is linked,
    not copied (a user's captures can be large): the build sees it as it sees the checkout's."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE, "reports"))
    (src / "reports").symlink_to(ROOT / "reports", target_is_directory=True)
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, src],
         cwd=tmp, env=_clean_env())
    (built,) = dist.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> SimpleNamespace:
    """A user's project (a git repository of its own when git is here) with the wheel installed in its
    .venv; the dependencies come from the test interpreter's site-packages through deps.pth."""
    project = tmp_path_factory.mktemp("project")
    if shutil.which("git"):
        _run(["git", "init", "-q"], cwd=project, env=_clean_env())
        (project / ".gitignore").write_text(".venv/\nreports/\n")
        _run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "--allow-empty",
              "-m", "a user's project"], cwd=project, env=_clean_env())
    venv = project / ".venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=project, env=_clean_env())
    python = venv / "bin" / "python"
    # Installed before deps.pth exists: pip then sees only the venv, never the editable install of
    # the checkout among the dependencies (the same name and version: it would skip the wheel).
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel],
         cwd=project, env=_clean_env())
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=project,
                   env=_clean_env()).stdout.strip()
    dependencies = _dependency_dirs()
    (Path(purelib) / "deps.pth").write_text("".join(f"{d}\n" for d in dependencies))
    return SimpleNamespace(project=project, venv=venv, python=python, script=venv / "bin" / SCRIPT,
                           purelib=Path(purelib), dependencies=dependencies,
                           env=_clean_env(TRITON_INTERPRET="1", ATTN_ROOFLINE_CACHE=str(project / "cache")))


def test_the_test_runs_outside_the_checkout(installed):
    for path in (installed.project, installed.venv, installed.purelib):
        assert not path.resolve().is_relative_to(ROOT)
    assert not any(Path(d).resolve() == ROOT for d in installed.dependencies)


def test_wheel_holds_every_file_of_the_packages_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"
    payload = {n for n in names if not n.startswith(dist_info + "/")}
    expected = _checkout_files()
    assert {"profiler/cli/__init__.py", "profiler/__main__.py", "kernels/flash_fwd.py",
            "attention_core/shape.py"} <= expected  # the derived list is the packages' own
    assert sum(n.endswith(".py") for n in expected) == len(expected)  # no package data, so far
    assert sorted(expected - payload) == []  # every module of the checkout is in the wheel
    assert sorted(payload - expected) == []  # and nothing else: no stale build/lib module
    assert {n.split("/")[0] for n in names} == {*PACKAGES, dist_info}  # no tests/, reports/, scripts/


def test_wheel_declares_the_console_script_and_the_dashboard_and_hf_extras(wheel):
    with zipfile.ZipFile(wheel) as z:
        dist_info = next(n.split("/")[0] for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(z.read(f"{dist_info}/entry_points.txt").decode())
        metadata = z.read(f"{dist_info}/METADATA").decode()
    assert dict(entry_points["console_scripts"]) == {SCRIPT: "profiler.cli:main"}
    assert {"Provides-Extra: dashboard", "Provides-Extra: hf", "Provides-Extra: fa4",
            'Requires-Dist: flash-attn-4>=4.0.0b36; extra == "fa4"'} <= set(metadata.splitlines())


def test_the_venv_imports_the_installed_package_not_the_checkout(installed):
    probe = ("import importlib.metadata, json, sys, attention_core, kernels, profiler, torch; "
             "print(json.dumps({'files': [m.__file__ for m in (attention_core, kernels, profiler)], "
             "'torch': torch.__file__, 'path': sys.path, 'editable': [m for m in sys.modules if 'editable' in m], "
             "'dist': str(importlib.metadata.distribution('attention-roofline').locate_file(''))}))")
    found = json.loads(_run([installed.python, "-c", probe], cwd=installed.project, env=installed.env).stdout)
    for package, file in zip(PACKAGES, found["files"]):
        assert Path(file) == installed.purelib / package / "__init__.py"
    assert Path(found["dist"]) == installed.purelib  # its metadata, not the editable install's
    assert found["editable"] == []  # deps.pth did not run the editable finder of the dependencies' folder
    # Nothing of the checkout is on sys.path but the dependencies' folder (in CI, .venv lies inside the checkout).
    entries = [(installed.project / p).resolve() for p in found["path"]]
    deps = installed.dependencies
    assert [e for e in entries if e.is_relative_to(ROOT) and not any(e.is_relative_to(d) for d in deps)] == []
    assert any(Path(found["torch"]).is_relative_to(d) for d in installed.dependencies)


def test_help_names_every_subcommand(installed):
    out = _run([installed.script, "--help"], cwd=installed.project, env=installed.env).stdout
    assert out.startswith("usage: attention-roofline ")  # the console script names itself
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) >= {"capture", "sweep", "model", "report", "remodel"}
    for command in sub.choices:
        assert f"    {command} " in out, command


def test_model_gives_the_flops_of_the_formula(installed):
    batch, heads, seq, dim = 2, 4, 1024, 32
    out = _run([installed.script, "model", "--seq", seq, "--batch", batch, "--heads", heads, "--dim", dim,
                "--json"], cwd=installed.project, env=installed.env).stdout
    totals = {row["impl"]: row for row in json.loads(out) if row["step"] == "total"}
    assert {"naive", "triton_flash", "sdpa_math"} <= set(totals)
    for row in totals.values():
        assert row["flops"] == 4 * batch * heads * seq * seq * dim  # 4·B·H·N²·D: two matmuls, non-causal fwd


def test_capture_on_the_cpu_writes_its_rows_under_the_working_folder(installed):
    """A capture under the Triton interpreter (triton_flash needs its kernels' source, which the wheel
    ships) into ./reports of the user's project, as the README says."""
    impls = ["naive", "sdpa_math", "triton_flash"]
    _run([installed.script, "capture", "--seq", 64, "--batch", 1, "--heads", 2, "--dim", 16,
          "--impl", ",".join(impls), "--rep-ms", 1, "--device", "cpu"],
         cwd=installed.project, env=installed.env, timeout=600)
    (folder,) = (installed.project / "reports").iterdir()
    rows = pd.read_parquet(folder / "results.parquet")
    expected = {("naive", "total"), *(("naive", step) for step in NAIVE_STEPS),
                ("sdpa_math", "total"), ("triton_flash", "total")}
    assert set(zip(rows["impl"], rows["step"])) == expected and len(rows) == len(expected)
    # triton_flash ran in the Triton interpreter: checked, but its time is not a kernel's, and the row says so
    expected_status = rows["impl"].map(lambda impl: "interpreted" if impl == "triton_flash" else "ok")
    assert (rows["status"] == expected_status).all(), rows[["impl", "step", "status", "message"]]
    assert (rows[["batch", "heads", "seq_q", "seq_kv", "head_dim"]] == [1, 2, 64, 64, 16]).all().all()
    assert set(rows["dtype"]) == {"fp32"}  # the CPU default
    totals = rows[rows["step"] == "total"]
    assert (totals["flops"] == 4 * 1 * 2 * 64 * 64 * 16).all()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["command"].startswith(f"{SCRIPT} capture ")
    assert meta["finished"] is True
    # The installed code is in no checkout: the project's own HEAD says nothing about it
    assert meta["git_revision"] is None
    assert (installed.project / "cache" / "ceilings.json").is_file()  # measured here, not the user's cache


def test_the_git_revision_is_the_checkouts_where_the_code_is_tracked():
    """The other side of meta.json's None above: run from the checkout, the revision is its HEAD."""
    from profiler.measure.meta import git_revision

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          env=_clean_env()) if shutil.which("git") else None
    if head is None or head.returncode != 0:
        pytest.skip("the checkout is not a git repository (or git is missing)")
    assert git_revision().removesuffix("-dirty") == head.stdout.strip()
