"""Compile the Gluon kernels for sm_90a on a machine without a GPU: spills, shared memory, TMA ops, host time.

    python -m pip install --no-deps --target /tmp/t36site triton==3.6.0     # the GPU machine's triton, once
    TRITON_SITE=/tmp/t36site python scripts/perf_experiments/gluon_compile_cpu.py [bshd|bhsd|fp8|merges|ptx FOLDER]

Triton compiles to PTX and cubin without a device when it is given a target, so the Gluon forward and
backward (kernels/flash_fwd_hopper.py, kernels/flash_bwd_hopper.py) can be built here for every
configuration the defaults take, and ptxas (shipped in the triton wheel) says what each costs in
registers, spills and shared memory: the checks a kernel change needs before it spends GPU time. The
script stands in for the CUDA driver (a fake one that names sm_90 and launches nothing), so every call
compiles or finds its cached kernel and returns. It also times the host side of one inference call
through kernels.hf_attention on BSHD views, everything but the launch itself. ``fp8`` instead compiles the
fp8 forward in every configuration of scripts/perf_experiments/fp8_probe.py (rounds 3a and 3b, and those left
out for their spills) and prints
each one's spills (docs/perf-notes.md, "FP8 forward", round 3). ``ptx FOLDER`` writes the PTX of the forward's
default configs into FOLDER, so that two trees' compare with ``diff -r``, and prints ptxas' report of each.
``merges`` prints ptxas' report of the two merges of fp32 partials (kernels.flash_decode's combine and
kernels.tail_combine's) at 16 to 256 splits, the most either takes (docs/perf-notes.md, round 25).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36site"))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402


class _NoDevice:
    """The driver calls a compile makes, for an sm_90 target; nothing launches. A kernel's launcher (which
    kernels._launch.LaunchCache calls directly) is a no-op, and loading it reports an H100's limits."""

    launcher_cls = staticmethod(lambda src, metadata: lambda *args, **kwargs: None)
    # (module, function, registers, spills, max threads) as CUDA's loader returns them; 227 KB of shared memory
    utils = types.SimpleNamespace(load_binary=lambda name, kernel, shared, device: (None, None, 0, 0, 1024),
                                  get_device_properties=lambda device: {"max_shared_mem": 232448})

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


COMPILED: list[tuple[str, object]] = []
_run = JITFunction.run


def _compile_only(self, *args, grid, warmup, **kwargs):
    kernel = _run(self, *args, grid=grid, warmup=True, **kwargs)
    COMPILED.append((self.fn.__name__, kernel))
    return kernel


def stand_in_for_an_h100():
    driver.set_active(_NoDevice())
    JITFunction.run = _compile_only
    # 132 SMs and 50 MB of L2, as an H100 SXM reports them; CPU tensors pass for CUDA ones.
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(
        multi_processor_count=132, L2_cache_size=50 * 2**20, major=9, minor=0)
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.Tensor.is_cuda = property(lambda self: True)


def ptxas_report(kernel) -> str:
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    out = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True,
                         text=True).stderr
    spills = [line.split(":")[-1].strip() for line in out.splitlines() if "spill" in line]
    tma = sorted(set(re.findall(r"cp\.(?:async\.bulk|reduce\.async\.bulk)\.tensor\.\dd", kernel.asm["ptx"])))
    return f"smem {kernel.metadata.shared} B, {spills[0] if spills else '?'}, {', '.join(tma)}"


def disassemble(kernel) -> str:
    """The kernel's SASS: nvdisasm (shipped in the triton wheel) of its cubin, with the branch targets' labels."""
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        return subprocess.run([str(nvdisasm), "-c", cubin.name], capture_output=True, text=True, check=True).stdout


def make(layout, batch, heads, seq, head_dim):
    if layout == "bshd":
        return torch.randn(batch, seq, heads, head_dim, dtype=torch.bfloat16).transpose(1, 2)
    return torch.randn(batch, heads, seq, head_dim, dtype=torch.bfloat16)


def fp8_configurations():
    """Each fp8 configuration of fp8_probe.py, at both head_dims, causal or not: ptxas's spills, or why not."""
    from fp8_probe import GLUON_VARIANTS, GLUON_VARIANTS_3B, NOT_TIMED

    from kernels import flash_fwd_hopper
    from kernels.flash_fwd_fp8 import FP8, keys_contiguous_layout

    for head_dim in (64, 128):
        for causal in (False, True):
            q = torch.randn(2, 4, 1024, head_dim).to(FP8)
            k = torch.randn(2, 2, 1024, head_dim).to(FP8)
            descales = (torch.ones(2, 4), torch.ones(2, 2), torch.ones(2, 2))
            for name, config in {**GLUON_VARIANTS, **GLUON_VARIANTS_3B, **NOT_TIMED}.items():
                try:
                    flash_fwd_hopper.hopper_forward(q, k, keys_contiguous_layout(k), causal, head_dim ** -0.5,
                                                    config, descales=descales)
                    report = ptxas_report(COMPILED[-1][1])
                except Exception as err:  # ptxas refuses a configuration whose registers do not fit
                    report = f"does not compile: {str(err).splitlines()[0][:160]}"
                print(f"fp8 D{head_dim} {'causal' if causal else 'full'} {name}: {report}", flush=True)


def ptx_text(kernel) -> str:
    """A kernel's PTX without its debug information (``.loc``, ``.file``, comments, ``$L__tmp`` labels, the debug
    sections), so that two trees' code compares line by line."""
    lines = []
    for line in kernel.asm["ptx"].split(".section")[0].splitlines():
        stripped = line.strip()
        if stripped.startswith((".loc", ".file", "//")) or re.fullmatch(r"\$L__tmp\d+:", stripped):
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def forward_ptx(folder: str):
    """The Gluon forward's default configs (head_dim 64 and 128, causal and not, Nq 1500, 3000 and 8192: every
    config default_config picks at those lengths) into ``folder``: each one's PTX (:func:`ptx_text`), and a line of
    ptxas' report each on stdout. Two trees' folders compare with ``diff -r`` (docs/perf-notes.md, round 20)."""
    from kernels import flash_fwd_hopper

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    print(f"triton {triton.__version__}, bhsd inputs, sm_90a")
    for head_dim in (64, 128):
        for causal in (False, True):
            for seq in (1500, 3000, 8192):
                q = make("bhsd", 2, 4, seq, head_dim)
                flash_fwd_hopper.hopper_forward(q, q, q, causal, head_dim ** -0.5,
                                                config=flash_fwd_hopper.default_config(head_dim, causal, seq))
                kernel = next(kernel for name, kernel in reversed(COMPILED) if name == "_attn_fwd_hopper")
                name = f"fwd_D{head_dim}_{'causal' if causal else 'full'}_N{seq}"
                (out / f"{name}.ptx").write_text(ptx_text(kernel))
                print(f"{name}: {ptxas_report(kernel)}", flush=True)


def merges() -> None:
    """ptxas' report of each merge of partials at head_dim 128, its splits padded to 16 ... 256."""
    from kernels import flash_decode, tail_combine

    for splits in (16, 64, 128, 256):
        o, lse = torch.empty(2, 4, 3, 128, dtype=torch.bfloat16), torch.empty(2, 4, 3)
        o_part, lse_part = torch.empty(2 * 4 * 3 * splits, 128), torch.empty(2 * 4 * 3 * splits)
        flash_decode._decode_combine[(24,)](o, lse, o_part, lse_part, splits, HEAD_DIM=128, BLOCK_S=splits, PDL=True,
                                            num_warps=4)
        print(f"decode combine, {splits} splits: {ptxas_report(COMPILED[-1][1])}", flush=True)
        o_part, lse_part = tail_combine.partials(1, 128, splits, 128, "cpu")  # one tail tile of 128 rows
        tail_combine.combine(o, lse, o_part, lse_part, torch.zeros(1, 3, dtype=torch.int32), 128)
        print(f"tail merge, {splits} splits: {ptxas_report(COMPILED[-1][1])}", flush=True)


def main():
    layout = sys.argv[1] if len(sys.argv) > 1 else "bshd"
    stand_in_for_an_h100()
    if layout == "merges":
        return merges()
    if layout == "fp8":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        return fp8_configurations()
    if layout == "ptx":
        return forward_ptx(sys.argv[2])
    from kernels import flash_bwd_hopper, flash_fwd_hopper
    from kernels.hf_attention import triton_flash_attention_forward

    print(f"triton {triton.__version__}, {layout} inputs, sm_90a")
    for head_dim in (64, 128):
        for causal in (False, True):
            q, k = make(layout, 2, 4, 1000, head_dim), make(layout, 2, 2, 1000, head_dim)
            o, lse = flash_fwd_hopper.hopper_forward(q, k, k, causal, head_dim ** -0.5)
            print(f"fwd D{head_dim} {'causal' if causal else 'full'}: {ptxas_report(COMPILED[-1][1])}")
            flash_bwd_hopper.hopper_backward(o, q, k, k, o, lse, causal, head_dim ** -0.5)
            backward = next(kernel for name, kernel in reversed(COMPILED) if name == "_attn_bwd_hopper")
            print(f"bwd D{head_dim} {'causal' if causal else 'full'}: {ptxas_report(backward)}")

    class Layer(torch.nn.Module):
        is_causal = True

    q, k, v = make(layout, 1, 32, 256, 128), make(layout, 1, 8, 256, 128), make(layout, 1, 8, 256, 128)
    import kernels.flash_fwd
    import kernels.hf_attention

    for module in (kernels.flash_fwd, kernels.hf_attention):  # CPU tensors are the stand-in's CUDA tensors
        module.check_triton_device = lambda t, name="q": None
    with torch.inference_mode():
        for _ in range(3):
            triton_flash_attention_forward(Layer(), q, k, v, None)
        start = time.perf_counter()
        for _ in range(300):
            triton_flash_attention_forward(Layer(), q, k, v, None)
    host = (time.perf_counter() - start) / 300 * 1e6
    print(f"host time of one inference call through kernels.hf_attention (launch left out): {host:.0f} us")


if __name__ == "__main__":
    main()
