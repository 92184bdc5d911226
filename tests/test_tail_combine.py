"""kernels.tail_combine under the interpreter: the key chunks of a forward's tail tiles, each computed by the fp64
oracle over its own keys, merged into the output and logsumexp the oracle gives over all of them."""

import pytest
import torch

from kernels import tail_combine
from kernels import tile_schedule as ts
from kernels.reference import attention_oracle

SENTINEL = 7.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("seq_q,seq_kv", [(37, 50), (16, 9), (40, 1), (33, 64)])
def test_merged_chunks_are_the_oracle_and_touch_only_the_tail_rows(seq_q, seq_kv, dtype):
    """Small tiles (16 rows, 8 keys) on 16 programs, so a few tiles are left after the full waves; o a BSHD view.
    Rows past seq_q hold NaN in the partials, as the kernel leaves them unspecified: the merge must not store them."""
    batch, heads, head_dim, block_m, block_n, programs = 2, 3, 32, 16, 8, 16
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, head_dim, generator=g, dtype=torch.float64)
               for n in (seq_q, seq_kv, seq_kv))
    m_blocks, key_tiles = -(-seq_q // block_m), -(-seq_kv // block_n)
    total = m_blocks * batch * heads
    split = ts.split_tail(total, programs, key_tiles) or ts.SplitTail(total - 2, 2, key_tiles, 1)
    table = tail_combine.tail_tiles(split, m_blocks, batch * heads, heads, ts.Schedule(1, False), block_m, "cpu")

    o_part, lse_part = tail_combine.partials(split.tail, block_m, split.splits, head_dim, "cpu")
    o_part.fill_(float("nan")), lse_part.fill_(float("nan"))
    for i, (z, h, off_m) in enumerate(table.tolist()):
        rows = slice(off_m, min(off_m + block_m, seq_q))
        for c in range(split.splits):
            _, first, n, _ = ts.work_item(split.full + i * split.splits + c, split, key_tiles)
            keys = slice(first * block_n, min(seq_kv, (first + n) * block_n))
            o_c, lse_c = attention_oracle(q[z, h, rows][None, None], k[z, h, keys][None, None],
                                          v[z, h, keys][None, None], return_lse=True)
            at = (i * block_m + torch.arange(rows.stop - rows.start)) * split.splits + c
            o_part[at], lse_part[at] = o_c[0, 0].float(), lse_c[0, 0].float()

    o = torch.full((batch, seq_q, heads, head_dim), SENTINEL, dtype=dtype).transpose(1, 2)  # a BSHD view
    lse = torch.full((batch, heads, seq_q), SENTINEL)
    tail_combine.combine(o, lse, o_part, lse_part, table, block_m)

    want, want_lse = attention_oracle(q, k, v, return_lse=True)
    done = torch.zeros(batch, heads, seq_q, dtype=torch.bool)
    for z, h, off_m in table.tolist():
        done[z, h, off_m:off_m + block_m] = True
    tol = 2e-3 if dtype == torch.float16 else 1e-5
    assert done.any()
    torch.testing.assert_close(o[done].double(), want[done], atol=tol, rtol=tol)
    torch.testing.assert_close(lse[done].double(), want_lse[done], atol=1e-5, rtol=1e-5)
    assert (o[~done] == SENTINEL).all() and (lse[~done] == SENTINEL).all()
