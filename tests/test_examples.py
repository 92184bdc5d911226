"""The client scripts under examples/ that `profiler observe` runs unchanged: each runs its tiny CPU default
as `python SCRIPT` would, in a subprocess, and prints its config line and one line per phase. The
in-process tests load a script as a module and check its bad-input messages and the numbers it computes."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from script_module import script_module

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> list[str]:
    result = subprocess.run([sys.executable, f"examples/{script}", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def _load(script: str):
    return script_module(f"examples/{script}")


@pytest.fixture(scope="module")
def hf_llama():
    return _load("hf_llama.py")


def test_hf_llama_tiny_runs_every_phase():
    lines = _run("hf_llama.py")
    assert lines[0] == ("config: llama layers=2 hidden=64 heads=4 kv_heads=2 head_dim=16 intermediate=128 vocab=256 "
                        "dtype=float32 device=cpu attn=sdpa batch=2 context=13")
    assert [line.split(":")[0] for line in lines[1:]] == ["prefill", "generate", "train"]
    assert re.fullmatch(r"prefill: B2 x 13 tokens in \d+\.\d\d s", lines[1])
    assert re.fullmatch(r"generate: B2 x 3 new tokens after 13 \(prefill included\) in \d+\.\d\d s", lines[2])
    loss = float(re.fullmatch(r"train: B2 x 13 tokens, loss (\d+\.\d+) in \d+\.\d\d s", lines[3]).group(1))
    assert abs(loss - math.log(256)) < 0.1  # random weights of std 0.02: near-uniform logits over 256 tokens


def test_hf_llama_runs_the_phases_asked_in_their_order(hf_llama, capsys):
    hf_llama.main(["--phases", "train,prefill", "--context", "8", "--batch", "1", "--layers", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert "layers=1 " in lines[0] and lines[0].endswith("batch=1 context=8")
    assert [line.split(":")[0] for line in lines[1:]] == ["train", "prefill"]


@pytest.mark.parametrize("argv, message", [
    (["--phases", "bogus"], "argument --phases: 'bogus' is not a phase; allowed: prefill, generate, train"),
    (["--phases", ","], "argument --phases: no phase given; allowed: prefill, generate, train"),
    (["--context", "0"], "argument --context: 0 is not a positive integer"),
    (["--warmup", "-1"], "argument --warmup: -1 is negative; allowed: 0 or more"),
])
def test_hf_llama_bad_input_is_one_line_and_exit_2(hf_llama, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        hf_llama.main(argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err == f"hf_llama.py: error: {message}\n"


def test_hf_llama_unknown_attn_is_one_line(hf_llama, capsys):
    with pytest.raises(SystemExit) as stop:
        hf_llama.main(["--attn", "bogus", "--phases", "prefill"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert err.startswith('hf_llama.py: error: --attn bogus: Specified `attn_implementation="bogus"` is not supported')


def test_hf_llama_our_kernel_without_the_project_kernel_is_one_line(hf_llama, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "kernels.hf_attention", None)  # importing it raises ImportError
    with pytest.raises(SystemExit) as stop:
        hf_llama.main(["--attn", "triton_fa"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert err.startswith("hf_llama.py: error: --attn triton_fa needs this project's kernels.hf_attention")


def test_hf_llama_names_our_kernel_as_transformers_takes_it(hf_llama, capsys):
    from kernels.hf_attention import DEFAULT_NAME

    assert hf_llama.OUR_ATTN == DEFAULT_NAME
    with pytest.raises(SystemExit) as stop:
        hf_llama.main(["--attn", "triton_flash"])  # the profiler's name; transformers reserves "flash"
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "hf_llama.py: error: --attn triton_flash: transformers loads any attn_implementation containing 'flash' "
        "from the Hub; this project's kernel is --attn triton_fa\n")


def test_hf_llama_tiny_runs_on_our_kernel_with_sdpas_loss():
    """The example as a user runs it with our kernel (the interpreter on the CPU): every phase, the
    same training loss as sdpa's (same seed, fp32), and every attention call on our kernel: per layer
    one prefill, one generate prefill and 2 decode steps (split-KV: one query on the cache), one
    training forward that will run a backward."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    ours, sdpa = _run("hf_llama.py", "--attn", "triton_fa"), _run("hf_llama.py")
    assert ours[0] == sdpa[0].replace("attn=sdpa", "attn=triton_fa")
    assert [line.split(":")[0] for line in ours[1:]] == ["prefill", "generate", "train", "dispatch"]
    loss = re.compile(r"train: B2 x 13 tokens, loss (\d+\.\d+) in")
    assert loss.match(ours[3]).group(1) == loss.match(sdpa[3]).group(1)
    assert ours[4] == ("dispatch: 10 calls on our kernel (bwd tiled 2, fwd split-kv x1 10), 0 on sdpa")


def test_hf_llama_chunked_loss_equals_transformers_loss(hf_llama, monkeypatch):
    """The chunked, recomputed loss is transformers' own next-token loss, value and lm_head gradient,
    with chunks that do not divide the 2 x 12 predicted positions."""
    monkeypatch.setattr(hf_llama, "LOSS_CHUNK_TOKENS", 5)
    torch.manual_seed(0)
    args = hf_llama.parse_args(["--tiny"])
    model = hf_llama.build_model(args).double()
    input_ids = torch.randint(0, 256, (2, 13))

    expected = model(input_ids=input_ids, labels=input_ids).loss
    expected.backward()
    expected_grad = model.lm_head.weight.grad.clone()
    model.zero_grad()

    hidden = model.model(input_ids=input_ids).last_hidden_state
    loss = hf_llama.next_token_loss(model.lm_head, hidden, input_ids)
    loss.backward()
    torch.testing.assert_close(loss, expected.float(), rtol=1e-6, atol=0)  # the chunks sum in fp32
    torch.testing.assert_close(model.lm_head.weight.grad, expected_grad, rtol=1e-6, atol=1e-9)


def test_hf_llama_batch_default_follows_context(hf_llama):
    assert hf_llama.parse_args(["--no-tiny", "--context", "8192"]).batch == 4
    assert hf_llama.parse_args(["--no-tiny", "--context", "8193"]).batch == 1
    assert hf_llama.parse_args(["--tiny"]).batch == 2


def test_nanogpt_tiny_trains_two_steps():
    lines = _run("nanogpt.py")
    assert lines[0] == ("config: nanogpt layers=2 heads=2 head_dim=16 width=32 vocab=128 dtype=fp32 device=cpu "
                        "batch=2 context=33")
    assert len(lines) == 3
    for step, line in enumerate(lines[1:], start=1):
        loss = float(re.fullmatch(rf"train step {step}/2: B2 x 33 tokens, loss (\d+\.\d+) in \d+\.\d\d s",
                                  line).group(1))
        assert abs(loss - math.log(128)) < 0.1  # GPT-2's 0.02 init: near-uniform logits


def test_flex_window_tiny_runs_forward_steps():
    lines = _run("flex_window.py")
    assert lines[0] == ("config: flex_window layers=2 heads=2 head_dim=16 dtype=fp32 device=cpu compile=False "
                        "backward=False batch=1 seq=64 window=16")
    assert re.fullmatch(r"block mask: 64 x 64, window 16, 1 of 1 blocks of 128 x 128 visited, built in \d+\.\d\d s",
                        lines[1])
    losses = [re.fullmatch(rf"step {step}/2: B1 x 64 tokens, forward only, loss (\d+\.\d+) in \d+\.\d\d s",
                           line).group(1) for step, line in enumerate(lines[2:], start=1)]
    assert len(losses) == 2 and losses[0] == losses[1]  # no optimizer step on the CPU: the same forward twice


def test_flex_window_counts_the_visited_blocks():
    """At 4096 tokens and a 256-token window (two 128-blocks), query block i visits kv blocks i-2 (partial),
    i-1 (full) and i (the diagonal, partial): 32 + 31 + 30 of 32 x 32."""
    flex_window = _load("flex_window.py")
    block_mask = flex_window.create_block_mask(flex_window.sliding_window_causal(256), B=None, H=None,
                                               Q_LEN=4096, KV_LEN=4096, device="cpu")
    assert flex_window.visited_blocks(block_mask) == (32 + 31 + 30, 32 * 32)
