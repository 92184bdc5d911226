"""What ptxas makes of Gluon backward variants, compiled for sm_90a on a machine without a GPU.

    TRITON_SITE=/tmp/t36site VARIANTS="default,64;tma,64,dkv_tma=1" [CAUSALS=0,1] \\
        python scripts/perf_experiments/gluon_bwd_ptxas.py

For each variant (``name,D[,field=value...]``: the default config (kernels.flash_bwd_hopper.default_config) of the
compile shape, N 1000 with 2 query heads per K/V head, so ``dkv_tma`` on, with those BackwardConfig fields changed, as
gluon_bwd_probe.py's VARIANTS) and mask: ptxas's shared memory, stack and spill bytes
(gluon_compile_cpu.ptxas_report), then from the SASS (nvdisasm of the cubin) the local-memory loads and
stores in the basic blocks that issue an HGMMA (the step's code) and elsewhere, and the counts of ``MUFU`` and
of ``I2F.RP`` (the start of an integer division). Static counts: a reading of the code, not a measurement.
docs/perf-notes.md, "Gluon backward", rounds 14 and 15, cite its output (before round 15 "default" was CONFIGS,
without ``dkv_tma``).
"""
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gluon_compile_cpu as compile_cpu  # noqa: E402

compile_cpu.stand_in_for_an_h100()
from kernels import flash_bwd_hopper as HB  # noqa: E402
from kernels import flash_fwd_hopper as HF  # noqa: E402


def sass_counts(kernel) -> str:
    text = compile_cpu.disassemble(kernel).splitlines()
    blocks, current = [], []
    for line in text:
        if re.match(r"^\s*\.L_x_\d+:", line):
            blocks.append(current)
            current = []
        current.append(line)
    blocks.append(current)
    step, other = [0, 0], [0, 0]
    for block in blocks:
        into = step if any("HGMMA" in line for line in block) else other
        into[0] += sum("LDL" in line for line in block)
        into[1] += sum("STL" in line for line in block)
    mufu = sum("MUFU." in line for line in text)
    divisions = sum("I2F.RP" in line for line in text)
    return (f"step LDL/STL {step[0]}/{step[1]}, elsewhere {other[0]}/{other[1]}, MUFU {mufu}, "
            f"I2F.RP {divisions}")


def main() -> None:
    causals = [c == "1" for c in os.environ.get("CAUSALS", "0,1").split(",")]
    for item in os.environ["VARIANTS"].split(";"):
        name, dim, *fields = item.split(",")
        head_dim = int(dim)
        changes = {key: int(value) for key, value in (f.split("=") for f in fields)}
        for causal in causals:
            q = compile_cpu.make("bhsd", 2, 4, 1000, head_dim)
            k = compile_cpu.make("bhsd", 2, 2, 1000, head_dim)
            o, lse = HF.hopper_forward(q, k, k, causal, head_dim ** -0.5)
            # the compile shape's own default (2 query heads per K/V head x N 1000: dkv_tma at both head dims)
            config = HB.default_config(head_dim, causal, 1000, 2)._replace(**changes)
            HB.hopper_backward(o, q, k, k, o, lse, causal, head_dim ** -0.5, config)
            kernel = next(kk for n, kk in reversed(compile_cpu.COMPILED) if n == "_attn_bwd_hopper")
            print(f"{name:10} D{head_dim} {'causal' if causal else 'full  '} {compile_cpu.ptxas_report(kernel)}; "
                  f"{sass_counts(kernel)}", flush=True)


if __name__ == "__main__":
    main()
