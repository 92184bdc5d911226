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
    err, sdpa_err = relative_error(got, exact), relative_error(want, exact)
    assert relative_error(got, want) <= BF16_TOL, f"ours vs sdpa {relative_error(got, want):.2e}"
    assert err <= 2 * sdpa_err + FLOOR, f"ours {err:.2e} vs sdpa {sdpa_err:.2e} from fp32"


@torch.no_grad()
def test_decode_with_a_kv_cache_matches_sdpas_greedy_steps(models):
    """sdpa generates greedily; ours decodes the same tokens on its own KV cache, teacher-forced, and each
    step's logits must agree. Logits, not tokens: two argmaxes within max|Δ| of each other can differ only
    at a top-two gap under 2·max|Δ|, a bf16 tie, after which the two runs would continue on other tokens."""
    sdpa, ours, _ = models
    ids = _prompt(1, 1000)
    greedy = sdpa.generate(ids, max_new_tokens=DECODE_STEPS, do_sample=False, pad_token_id=0,
                           output_logits=True, return_dict_in_generate=True)
    tokens = greedy.sequences[:, ids.shape[1]:]  # (1, DECODE_STEPS)
    STATS.reset()
    out = ours(ids, use_cache=True)
    steps = [out.logits[:, -1]]
    for step in range(DECODE_STEPS - 1):
        out = ours(tokens[:, step:step + 1], past_key_values=out.past_key_values, use_cache=True)
        steps.append(out.logits[:, -1])
    assert (STATS.kernel_calls, STATS.fallback_calls) == (LAYERS * DECODE_STEPS, 0)
    for step, (got, want) in enumerate(zip(steps, greedy.logits)):
        assert relative_error(got, want) <= BF16_TOL, f"step {step}: {relative_error(got, want):.2e}"
