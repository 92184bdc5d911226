"""Autotuning shared by our Triton FlashAttention kernels (forward and backward), and the
constants of exp via exp2 that every Triton kernel here uses.

Each kernel lists its candidate (BLOCK_M, BLOCK_N, num_warps, num_stages) per class of problem; the
first of each list is the default (what ``ATTN_AUTOTUNE=0`` and the cost model use); the autotuner
times the rest once per key (head_dim, causal, precision, dtype, sequence bucket) and keeps the
winner on disk where Triton can (``cache_results``). Under the interpreter one small config runs:
autotuning two or more configs fails there, and speed is moot.
"""

from __future__ import annotations

import inspect
import os

import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# exp(x) = exp2(x · log2 e) and ln(x) = log2(x) · ln 2: the kernels fold log2(e) into the softmax
# scale so each score costs one FMA and one exp2. Host code uses the floats; @triton.jit code may
# only read globals that are constexprs, hence the twins.
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
LOG2E_C = tl.constexpr(LOG2E)
LN2_C = tl.constexpr(LN2)

Candidate = tuple[int, int, int, int]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)
INTERPRET_CANDIDATE: Candidate = (32, 16, 4, 1)


def candidate_class(head_dim: int, dot_precision: str) -> str:
    """Which candidate list applies: fp32 (IEEE dots) apart, else by head_dim."""
    if dot_precision == "ieee":
        return "fp32"
    return "d64" if head_dim <= 64 else f"d{head_dim}"


def dot_precision(dtype_name: str) -> str:
    """fp32 inputs multiply in IEEE fp32 (not tf32); fp16 and bf16 take the tensor-core path."""
    return "ieee" if dtype_name == "fp32" else "tf32"


def default_tile(candidates: dict[str, list[Candidate]], head_dim: int, dtype_name: str) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of the default candidate for this problem: the tile the kernel runs with
    when autotuning is off, and the tile the cost model assumes (profiler.model.fused)."""
    block_m, block_n, _, _ = candidates[candidate_class(head_dim, dot_precision(dtype_name))][0]
    return block_m, block_n


def configs_from(candidates: dict[str, list[Candidate]], interpret: Candidate = INTERPRET_CANDIDATE
                 ) -> list[triton.Config]:
    """Every distinct candidate as a triton.Config; under the interpreter a single small one."""
    tuples = [interpret] if INTERPRET else list(dict.fromkeys(c for cs in candidates.values() for c in cs))
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in tuples]


def pruner(candidates: dict[str, list[Candidate]]):
    """An ``early_config_prune`` that keeps this problem's candidates (only the default one when
    ATTN_AUTOTUNE=0, e.g. in tests, so each shape compiles one kernel, not four)."""

    def keep(configs, named_args, **kwargs):
        if INTERPRET:
            return configs[:1]
        args = {**named_args, **kwargs}
        wanted = candidates[candidate_class(args["HEAD_DIM"], args["DOT_PRECISION"])]
        if os.environ.get("ATTN_AUTOTUNE", "1") == "0":
            wanted = wanted[:1]
        as_tuple = {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages): c for c in configs}
        return [as_tuple[t] for t in wanted if t in as_tuple]

    return keep


def autotune(**kwargs):
    """``triton.autotune`` that also keeps its choices on disk across processes on Triton versions
    that can (``cache_results``; 3.6 and 3.9 do)."""
    if "cache_results" in inspect.signature(triton.autotune).parameters:
        kwargs["cache_results"] = True
    return triton.autotune(**kwargs)


def seq_bucket(seq_q: int, seq_kv: int) -> int:
    """Autotune key for sequence length: short (< 1024), medium (< 8192) or long."""
    longest = max(seq_q, seq_kv)
    return 0 if longest < 1024 else (1 if longest < 8192 else 2)
