"""Metadata of a measurement: where, with what and how it was taken. Stored next to every number."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch


def git_revision() -> str | None:
    """HEAD of the checkout this code runs from (``-dirty`` with uncommitted changes to tracked files);
    None when it is not a checkout, e.g. installed from a wheel: a site-packages inside a user's own
    repository (a project's .venv) would otherwise lend that repository's HEAD, which says nothing
    about this code. So the revision counts only where this very file is tracked."""
    here = Path(__file__).resolve()

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=here.parent)

    try:
        tracked = git("ls-files", "--error-unmatch", "--", here.name)
        if tracked.returncode != 0:
            return None
        out = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def sources_sha256() -> str | None:
    """The kernels that ran, by content: sha256 over this tree's kernels/*.py and attention_core/*.py, each file's
    name then bytes, in path order (scripts/hf_vs_sdpa.py's ``kernels_sha256`` is the same hash). git_revision
    cannot say it where the tree was copied with a stale .git, as onto the GPU machine; None where neither folder
    is beside this package (an installed wheel without them)."""
    root = Path(__file__).resolve().parents[2]
    paths = sorted([*root.glob("kernels/*.py"), *root.glob("attention_core/*.py")])
    if not paths:
        return None
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


# The peers' distributions (pip names) whose speed a capture can measure: their versions go into meta.json
# where installed, since a peer's release moves its rows as much as our code moves ours.
PEER_DISTRIBUTIONS = ("flash-attn-4", "flash-attn", "transformers")


def peer_versions() -> dict[str, str]:
    """{distribution: version} of the :data:`PEER_DISTRIBUTIONS` installed here."""
    versions = {}
    for name in PEER_DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def _program() -> str:
    """How the command was started: ``python -m profiler`` or the script's name, after ``torchrun
    --nproc-per-node=G [--nnodes=N]`` when torchrun started it (its workers' argv leave it out)."""
    name = Path(sys.argv[0]).name
    program = "python -m profiler" if name == "__main__.py" else name
    if "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("LOCAL_WORLD_SIZE"):
        per_node, world = int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ.get("WORLD_SIZE", "1"))
        nodes = f" --nnodes={world // per_node}" if world > per_node else ""
        program = f"torchrun{nodes} --nproc-per-node={per_node} -m profiler" if name == "__main__.py" else \
            f"torchrun{nodes} --nproc-per-node={per_node} {name}"
    return program


def run_metadata(device: torch.device | str) -> dict:
    """Device name and compute capability, driver, torch / triton / CUDA versions, the command
    line, the git revision and the time."""
    device = torch.device(device)
    from profiler.measure.ceilings import device_name

    meta = {
        "device": device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
        "command": " ".join([_program(), *sys.argv[1:]]),
        "git_revision": git_revision(),
        "kernels_sha256": sources_sha256(),
        "peers": peer_versions(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if device.type == "cuda":  # which board power the rows' power_w is (profiler.measure.gpu_state.instant_power)
        from profiler.measure.gpu_state import power_reading

        meta["nvml_power"] = power_reading(device)
    if os.environ.get("TRITON_INTERPRET") == "1":  # Triton kernels ran in its interpreter: their rows say so too
        meta["triton_interpreter"] = True
    # Our kernels' switches (ATTN_GLUON=0 runs the portable kernels on sm_90, ATTN_AUTOTUNE=0 the first candidates): two
    # runs of one command differ only by them
    switches = {key: value for key, value in sorted(os.environ.items()) if key.startswith("ATTN_")}
    if switches:
        meta["env"] = switches
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta.update(
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            memory_bytes=props.total_memory,
            l2_bytes=getattr(props, "L2_cache_size", None),
            driver=_driver_version(),
            cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        )
    return meta
