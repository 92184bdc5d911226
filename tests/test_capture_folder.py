"""Where a capture's rows and roofs come from: --resume adds to a capture of this device only, and
a capture says when its ceilings came from the cache rather than from its own run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from profiler.cli import main
from profiler.store import load_capture

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--device", "cpu", "--seq", "32", "--batch", "1", "--heads", "1", "--dim", "16", "--rep-ms", "2",
         "--impl", "naive"]


def test_resume_refuses_a_capture_of_another_device(tmp_path, capsys):
    shipped = tmp_path / "reference-h200"
    shutil.copytree(ROOT / "reports" / "reference-h200", shipped)
    before = {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()}
    code = main(["capture", *SMALL, "--out", str(shipped), "--resume"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--resume: '{shipped}' was captured on 'NVIDIA H200', this is 'CPU" in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()} == before  # nothing written


def test_resume_on_the_same_device_adds_rows(tmp_path, capsys):
    out = tmp_path / "cap"
    assert main(["capture", *SMALL, "--out", str(out)]) == 0
    assert main(["capture", *SMALL[:-1], "naive,sdpa_math", "--out", str(out), "--resume"]) == 0
    _, frame = load_capture(out)
    assert set(frame[frame.step == "total"].impl) == {"naive", "sdpa_math"}


def test_a_capture_says_where_its_ceilings_came_from(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTN_ROOFLINE_CACHE", str(tmp_path / "cache"))
    assert main(["capture", *SMALL, "--out", str(tmp_path / "first")]) == 0
    first = json.loads((tmp_path / "first" / "meta.json").read_text())
    assert first["measured_ceilings_source"] == "measured by this run"
    assert "from the cache" not in capsys.readouterr().out
    assert main(["capture", *SMALL, "--out", str(tmp_path / "second")]) == 0
    second = json.loads((tmp_path / "second" / "meta.json").read_text())
    measured_at = first["measured_ceilings"]["measured_at"]
    first_curve, second_curve = (m["measured_ceilings"].pop("copy_curve") for m in (first, second))
    assert second["measured_ceilings"] == first["measured_ceilings"]  # the large ceilings from the cache
    assert second_curve["bytes"] == first_curve["bytes"] and second_curve["us"] != first_curve["us"]  # measured again
    assert second["measured_ceilings_source"].startswith(f"cache {tmp_path / 'cache' / 'ceilings.json'} (measured "
                                                         f"{measured_at};")
    assert second["measured_ceilings_source"].endswith("the copy curve by this run)")
    # What ran, by content, and the peers' versions: the same in both runs of one tree
    from profiler.measure.meta import peer_versions, sources_sha256

    assert first["kernels_sha256"] == second["kernels_sha256"] == sources_sha256() and len(sources_sha256()) == 64
    assert first["peers"] == peer_versions()
    assert f"Roofs (measured ceilings) from the cache {tmp_path / 'cache'}" in capsys.readouterr().out


def test_a_cache_under_home_is_named_from_home(tmp_path, monkeypatch):
    """measured_ceilings_source names the cache as ~/... where it is under the home folder (the default), so a
    shipped capture does not carry the measuring machine's home path; elsewhere the path as it is."""
    from profiler.measure.folder import _home_relative

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _home_relative(tmp_path / "home" / ".cache" / "attention-roofline" / "ceilings.json") == \
        "~/.cache/attention-roofline/ceilings.json"
    assert _home_relative(tmp_path / "elsewhere" / "ceilings.json") == str(tmp_path / "elsewhere" / "ceilings.json")


def test_sources_sha256_is_the_kernels_by_content_and_peers_are_whats_installed(monkeypatch, tmp_path):
    """kernels_sha256: sha256 over kernels/*.py and attention_core/*.py, each file's name then bytes, in path order
    (the hash scripts/hf_vs_sdpa.py has recorded since issue 39); peers: the installed peer distributions only."""
    import hashlib
    import importlib.metadata
    from pathlib import Path

    from profiler.measure import meta

    root = Path(meta.__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for path in sorted([*root.glob("kernels/*.py"), *root.glob("attention_core/*.py")]):
        digest.update(path.name.encode() + path.read_bytes())
    assert meta.sources_sha256() == digest.hexdigest()

    def version(name):
        if name == "flash-attn-4":
            return "4.0.0b36"
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert meta.peer_versions() == {"flash-attn-4": "4.0.0b36"}


def test_default_folder_names_the_device_in_one_slug():
    from profiler.measure.folder import default_folder

    folder = default_folder("CPU x86_64 (2 threads)")
    assert folder.parent == Path("reports") and folder.name.startswith("cpu-x86-64-2-threads-")
    assert default_folder("NVIDIA H200").name.startswith("nvidia-h200-")
