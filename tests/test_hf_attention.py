"""A tiny Llama (GQA: 4 query heads on 2 K/V heads) run by transformers on our Triton FlashAttention,
against the same weights on transformers' sdpa: prefill logits, greedy decoding with a KV cache, a
padded batch, one training step's gradients, and the dispatch of single calls (kernel or sdpa).

Tolerance, fp32: our kernels multiply fp32 in IEEE fp32 (kernels/flash_fwd.py), as does sdpa on the
CPU, so the two differ only in summation order: a few tens of units of roundoff u = 2^-24 ≈ 6e-8
after two layers (measured: 2e-7 for logits, 4e-7 for gradients). FP32_TOL = 1e-5 ≈ 170 u leaves
room for that while a wrong mask, scale or K/V grouping is off by 1e-2 or more.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

from kernels import hf_attention  # noqa: E402
from kernels.hf_attention import STATS, register, triton_flash_attention_forward  # noqa: E402
from kernels.reference import relative_error  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FP32_TOL = 1e-5
LAYERS, SEQ, NEW_TOKENS = 2, 13, 5  # 13: not a multiple of any block size of the kernel


@pytest.fixture(autouse=True)
def fresh_stats():
    STATS.reset()
    yield
    STATS.reset()


def _tiny_llama(attn_implementation: str) -> LlamaForCausalLM:
    """The same random weights for every call (seeded), in fp32, eval mode."""
    torch.manual_seed(0)
    config = LlamaConfig(
        num_hidden_layers=LAYERS, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=128, vocab_size=256, attn_implementation=attn_implementation,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def models():
    """(sdpa model, our model) with one state dict."""
    sdpa, ours = _tiny_llama("sdpa"), _tiny_llama(register())
    ours.load_state_dict(sdpa.state_dict())
    return sdpa, ours


def _input_ids(batch: int = 2) -> torch.Tensor:
    return torch.randint(0, 256, (batch, SEQ), generator=torch.Generator().manual_seed(1))


def test_prefill_logits_match_sdpa(models):
    sdpa, ours = models
    ids = _input_ids()
    with torch.no_grad():
        want, got = sdpa(ids).logits, ours(ids).logits
    assert relative_error(got, want) <= FP32_TOL
    assert (STATS.kernel_calls, STATS.fallback_calls) == (LAYERS, 0)


def test_greedy_generate_decodes_on_our_kernel(models):
    sdpa, ours = models
    ids = _input_ids()
    settings = dict(attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    want = sdpa.generate(ids, **settings)
    STATS.reset()
    got = ours.generate(ids, **settings)
    assert got.shape == (2, SEQ + NEW_TOKENS) and torch.equal(got, want)
    # One prefill and NEW_TOKENS - 1 single-token steps on the KV cache, each through every layer.
    assert (STATS.kernel_calls, STATS.fallback_calls) == (LAYERS * NEW_TOKENS, 0)


def test_padded_batch_falls_back_to_sdpa(models):
    sdpa, ours = models
    ids = _input_ids()
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding of the second sequence: a mask our kernel cannot apply
    with torch.no_grad():
        want, got = sdpa(ids, attention_mask=mask).logits, ours(ids, attention_mask=mask).logits
    assert torch.equal(got, want)  # the very same sdpa call
    assert STATS.kernel_calls == 0 and STATS.fallbacks == {"attention_mask": LAYERS}


def test_training_step_gradients_match_sdpa(models):
    sdpa, ours = models
    ids = _input_ids()
    losses = []
    for model in models:
        model.train()
        loss = model(ids, labels=ids).loss
        loss.backward()
        losses.append(loss.item())
    assert losses[1] == pytest.approx(losses[0], rel=FP32_TOL)
    for want, got in zip(sdpa.model.layers, ours.model.layers):
        assert relative_error(got.self_attn.q_proj.weight.grad, want.self_attn.q_proj.weight.grad) <= FP32_TOL
    assert (STATS.kernel_calls, STATS.fallback_calls) == (LAYERS, 0)


class _Attention(torch.nn.Module):
    """What the attention functions read from a model's attention layer."""

    is_causal = True
    num_key_value_groups = 2


# (q_len, kv_len, head_dim, extra keyword arguments, where the call runs)
CALLS = {
    "prefill": (13, 13, 16, {}, "kernel"),
    "decode": (1, 13, 16, {}, "kernel"),  # one query over the whole cache: non-causal
    "cross_attention": (5, 13, 16, {"is_causal": False}, "kernel"),
    "chunked_prefill": (5, 13, 16, {}, "causal_kv_len"),  # needs bottom-right causal
    "dropout": (13, 13, 16, {"dropout": 0.5}, "dropout"),
    "head_dim_24": (13, 13, 24, {}, "head_dim"),
    "head_dim_256_forward": (13, 13, 256, {}, "kernel"),
    "head_dim_256_backward": (13, 13, 256, {"requires_grad": True}, "head_dim"),  # our backward stops at 128
    "fp64": (13, 13, 16, {"dtype": torch.float64}, "dtype"),
    "position_bias": (13, 13, 16, {"position_bias": torch.zeros(1, 1, 13, 13)}, "position_bias"),
}


@pytest.mark.parametrize("case", CALLS)
def test_each_call_runs_where_it_gives_sdpas_answer(case):
    q_len, kv_len, head_dim, extra, path = CALLS[case]
    extra = dict(extra)
    dtype, requires_grad = extra.pop("dtype", torch.float32), extra.pop("requires_grad", False)
    g = torch.Generator().manual_seed(2)
    query = torch.randn(2, 4, q_len, head_dim, generator=g, dtype=dtype, requires_grad=requires_grad)
    key, value = (torch.randn(2, 2, kv_len, head_dim, generator=g, dtype=dtype) for _ in range(2))
    module = _Attention()
    torch.manual_seed(3)  # the same dropout draws for both calls
    got, weights = triton_flash_attention_forward(module, query, key, value, None, scaling=0.3, **extra)
    torch.manual_seed(3)
    want, _ = sdpa_attention_forward(module, query, key, value, None, scaling=0.3, **extra)
    assert got.shape == (2, q_len, 4, head_dim) and weights is None
    assert relative_error(got, want) <= (FP32_TOL if path == "kernel" else 0.0)
    assert (STATS.kernel_calls, dict(STATS.fallbacks)) == ((1, {}) if path == "kernel" else (0, {path: 1}))


def test_a_device_triton_cannot_run_on_falls_back(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")  # a CPU tensor without the interpreter
    query, key, value = (torch.randn(1, 2, 7, 16) for _ in range(3))
    got, _ = triton_flash_attention_forward(_Attention(), query, key, value, None)
    want, _ = sdpa_attention_forward(_Attention(), query, key, value, None)
    assert torch.equal(got, want) and STATS.fallbacks == {"device": 1}


def test_register_is_idempotent_and_refuses_names_transformers_dispatches_on():
    from transformers import AttentionInterface

    assert register() == register() == "triton_fa"
    assert AttentionInterface._global_mapping["triton_fa"] is triton_flash_attention_forward
    with pytest.raises(ValueError, match="'triton_flash' contains 'flash'"):
        register("triton_flash")  # transformers 5 would try to load it as a flash-attn kernel from the Hub
    with pytest.raises(ValueError, match="'eager'"):
        register("eager")


def test_register_does_not_take_a_name_in_use(monkeypatch):
    from transformers import AttentionInterface

    monkeypatch.setitem(AttentionInterface._global_mapping, "someone_elses", sdpa_attention_forward)
    with pytest.raises(ValueError, match="'someone_elses' is taken by sdpa_attention_forward"):
        register("someone_elses")


def test_importing_kernels_does_not_import_transformers():
    code = ("import sys, kernels, kernels.hf_attention; "
            "assert 'transformers' not in sys.modules, 'transformers imported'")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert hf_attention.DEFAULT_NAME == "triton_fa"
