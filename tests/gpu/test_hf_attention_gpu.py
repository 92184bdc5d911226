"""Llama-3-8B's attention geometry (32 query heads on 8 K/V heads, head_dim 128, hidden 4096) in a
2-layer Llama with a small MLP and vocabulary, bf16 on CUDA, run by transformers on our kernels
(kernels.hf_attention) against the same weights on transformers' sdpa.

Tolerance, bf16: the correctness gate lets each attention implementation be TOLERANCE["bf16"] =
4 · 2^-8 ≈ 1.6e-2 (relative) from exact attention (kernels/reference.py). Both models run the same bf16
layers around attention, so by the triangle inequality their logits may differ by the sum of the two
attentions' allowances: BF16_TOL = 2 · TOLERANCE["bf16"] ≈ 3.1e-2. As in test_gpu_kernels.py, ours is
also held to twice sdpa's own error plus FLOOR against an fp32 evaluation of the same bf16 weights.
"""

from __future__ import annotations

import pytest
import torch

from kernels.hf_attention import STATS, register
from kernels.reference import TOLERANCE, relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

transformers = pytest.importorskip("transformers")

BF16_TOL = 2 * TOLERANCE["bf16"]
FLOOR = 8e-3  # bf16's, as in test_gpu_kernels.py
LAYERS, DECODE_STEPS = 2, 6


def _llama(attn_implementation: str, dtype: torch.dtype):
    """The 2-layer Llama with Llama-3-8B's attention, on CUDA, randomly initialised."""
    config = transformers.LlamaConfig(
        num_hidden_layers=LAYERS, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        intermediate_size=1024, vocab_size=1024, max_position_embeddings=4096, rope_theta=500000.0,
        attn_implementation=attn_implementation,
    )
    with torch.device("cuda"):
        return transformers.LlamaForCausalLM(config).to(dtype).eval()


@pytest.fixture(scope="module")
def models():
    """(sdpa bf16, ours bf16, sdpa fp32), all with the weights of the first, rounded to bf16."""
    torch.manual_seed(0)
    sdpa = _llama("sdpa", torch.bfloat16)
    ours, reference = _llama(register(), torch.bfloat16), _llama("sdpa", torch.float32)
    for model in (ours, reference):
        model.load_state_dict(sdpa.state_dict())
    return sdpa, ours, reference


def _prompt(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, 1024, (batch, seq), device="cuda", generator=torch.Generator("cuda").manual_seed(seq))


@pytest.fixture(autouse=True)
def fresh_stats():
    STATS.reset()


@pytest.mark.parametrize("seq", [1000, 2048])
@torch.no_grad()
def test_prefill_logits_match_sdpa_in_bf16(models, seq):
    sdpa, ours, reference = models
    ids = _prompt(2, seq)
    want, exact = sdpa(ids).logits, reference(ids).logits
    STATS.reset()
    got = ours(ids).logits
    assert (STATS.kernel_calls, STATS.fallback_calls) == (LAYERS, 0)
    assert STATS.paths == {"fwd gluon-ws": LAYERS}  # transformers' BSHD views on the Gluon forward
    err, sdpa_err = relative_error(got, exact), relative_error(want, exact)
    assert relative_error(got, want) <= BF16_TOL, f"ours vs sdpa {relative_error(got, want):.2e}"
    assert err <= 2 * sdpa_err + FLOOR, f"ours {err:.2e} vs sdpa {sdpa_err:.2e} from fp32"


# Query and key projections scaled by this: scores of std about 0.1 instead of 1.6. With the default
# initialisation the bf16 model's logits are 11-14% (2 layers, 512 tokens; 41% at 1000 in the issue) from
# the fp32 model's with the same weights, as a score's bf16 rounding error grows with the score, so any
# two bf16 runs (sdpa's own forward and its generate among them) differ by as much; scaled, bf16 is 1.0% from
# fp32 (measured on the CPU, transformers' sdpa in bf16 and fp32), and ours against sdpa means something.
CONDITIONED_QK_GAIN = 0.25


@pytest.fixture(scope="module")
def conditioned_models():
    """(sdpa bf16, ours bf16, sdpa fp32) with the query and key projections scaled by CONDITIONED_QK_GAIN."""
    torch.manual_seed(1)
    sdpa = _llama("sdpa", torch.float32)
    with torch.no_grad():
        for layer in sdpa.model.layers:
            layer.self_attn.q_proj.weight.mul_(CONDITIONED_QK_GAIN)
            layer.self_attn.k_proj.weight.mul_(CONDITIONED_QK_GAIN)
    reference = sdpa
    sdpa = _llama("sdpa", torch.bfloat16)
    ours = _llama(register(), torch.bfloat16)
    for model in (sdpa, ours):
        model.load_state_dict(reference.state_dict())
    return sdpa, ours, reference


def _teacher_forced(model, ids: torch.Tensor, tokens: torch.Tensor) -> list[torch.Tensor]:
    """The last position's logits of a prefill over ``ids`` on a fresh KV cache, then of one decode step
    per token of ``tokens`` (1, steps - 1) on that cache: the path generate takes, with given tokens."""
    out = model(ids, use_cache=True, logits_to_keep=1)
    steps = [out.logits[:, -1].float()]
    for step in range(tokens.shape[1]):
        out = model(tokens[:, step:step + 1], past_key_values=out.past_key_values, use_cache=True)
        steps.append(out.logits[:, -1].float())
    return steps


@torch.no_grad()
def test_decode_with_a_kv_cache_matches_sdpa_teacher_forced(conditioned_models):
    """sdpa and ours each decode on their own KV cache along the same path, fed sdpa's greedy tokens
    (teacher-forced): each step's logits agree within BF16_TOL, and wherever sdpa's top-two gap exceeds
    twice the largest difference the two pick the same token. The model is one whose bf16 logits sit
    within a few percent of fp32 (checked first), so the comparison measures attention, not rounding."""
    sdpa, ours, reference = conditioned_models
    ids = _prompt(1, 1000)
    exact = reference(ids).logits[:, -1]
    conditioning = relative_error(sdpa(ids).logits[:, -1].float(), exact)
    assert conditioning <= 0.05, f"the bf16 model is {conditioning:.2e} from fp32: ill-conditioned"

    # sdpa's greedy tokens, on sdpa's own cache.
    out = sdpa(ids, use_cache=True, logits_to_keep=1)
    tokens = []
    for _ in range(DECODE_STEPS - 1):
        tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
        out = sdpa(tokens[-1], past_key_values=out.past_key_values, use_cache=True)
    tokens = torch.cat(tokens, dim=1)  # (1, DECODE_STEPS - 1)

    want = _teacher_forced(sdpa, ids, tokens)
    STATS.reset()
    got = _teacher_forced(ours, ids, tokens)
    assert (STATS.kernel_calls, STATS.fallback_calls) == (LAYERS * DECODE_STEPS, 0)
    # The prefill on the Gluon forward in transformers' BSHD layout, every single-query step split-KV.
    assert STATS.paths["fwd gluon-ws"] == LAYERS, STATS.paths
    assert sum(n for path, n in STATS.paths.items() if path.startswith("fwd split-kv")) == LAYERS * (DECODE_STEPS - 1)
    checked = 0
    for step, (g, w) in enumerate(zip(got, want)):
        assert relative_error(g, w) <= BF16_TOL, f"step {step}: {relative_error(g, w):.2e}"
        top2 = w.topk(2, dim=-1).values[0]
        if top2[0] - top2[1] > 2 * (g - w).abs().max():
            assert g.argmax() == w.argmax(), f"step {step}"
            checked += 1
    assert checked >= 1, "no step had a top-two gap above the error: the token check ran on nothing"

