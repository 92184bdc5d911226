"""Each Gluon kernel's SASS, compiled for sm_90a on a machine without a GPU: to show a refactor left the code alone.

    TRITON_SITE=/tmp/t36site python scripts/perf_experiments/gluon_sass_dump.py /tmp/sass-before
    ... change the kernels ...
    TRITON_SITE=/tmp/t36site python scripts/perf_experiments/gluon_sass_dump.py /tmp/sass-after
    diff -r /tmp/sass-before /tmp/sass-after

Builds the forward and the backward at head_dim 64 and 128, causal and not, with their default configs
(gluon_compile_cpu.py stands in for the driver), disassembles each cubin with the nvdisasm in the triton
wheel and writes its instructions without addresses to DIR/{fwd,bwd}_{D}_{causal}.sass, printing ptxas's
spills and shared memory beside each.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gluon_compile_cpu as compile_cpu  # noqa: E402

compile_cpu.stand_in_for_an_h100()
import torch  # noqa: E402

from kernels import flash_bwd_hopper, flash_fwd_hopper  # noqa: E402


def write_sass(kernel, path: Path) -> int:
    text = compile_cpu.disassemble(kernel)
    lines = [line.split("*/", 1)[-1].strip() for line in text.splitlines() if "/*" in line and "*/" in line]
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for head_dim in (64, 128):
        for causal in (False, True):
            q = torch.randn(2, 4, 1000, head_dim, dtype=torch.bfloat16)
            k = torch.randn(2, 2, 1000, head_dim, dtype=torch.bfloat16)
            o, lse = flash_fwd_hopper.hopper_forward(q, k, k, causal, head_dim ** -0.5)
            flash_bwd_hopper.hopper_backward(o, q, k, k, o, lse, causal, head_dim ** -0.5)
            for name, kernel_name in (("fwd", "_attn_fwd_hopper"), ("bwd", "_attn_bwd_hopper")):
                kernel = next(k for n, k in reversed(compile_cpu.COMPILED) if n == kernel_name)
                lines = write_sass(kernel, out / f"{name}_{head_dim}_{int(causal)}.sass")
                print(f"{name} D{head_dim} {'causal' if causal else 'full'}: {lines} instructions, "
                      f"{compile_cpu.ptxas_report(kernel)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
