"""kernels.tile_schedule: the Gluon kernels' tile order (the reference of their swizzled_tile)."""

import itertools

import pytest

from kernels import tile_schedule as ts
from kernels.tile_schedule import Schedule

H100_SMS, H100_L2 = 132, 50 * 2**20  # the H100 SXM's SM count and L2 size (NVIDIA's H100 whitepaper)


@pytest.mark.parametrize("bh,n_blocks,section,snake", [
    (1, 1, 1, False), (7, 5, 3, False), (7, 5, 3, True), (512, 11, 32, True), (6, 4, 8, False), (5, 9, 1, True),
])
def test_every_tile_once(bh, n_blocks, section, snake):
    """The order is a permutation of (head, rank), the last short section included."""
    seen = [ts.tile(t, n_blocks, bh, section, snake) for t in range(bh * n_blocks)]
    assert sorted(seen) == sorted(itertools.product(range(bh), range(n_blocks)))


def test_sections_go_longest_first_and_snake_reverses_every_other():
    order = [ts.tile(t, 3, 4, 2, False) for t in range(12)]
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2),
                     (2, 0), (3, 0), (2, 1), (3, 1), (2, 2), (3, 2)]
    snaked = [ts.tile(t, 3, 4, 2, True) for t in range(12)]
    assert snaked[:6] == order[:6]
    assert snaked[6:] == [(2, 2), (3, 2), (2, 1), (3, 1), (2, 0), (3, 0)]


def test_section_heads_fit_the_share_of_l2_as_a_power_of_two():
    # Backward, D128 N2048 bf16: Q, dO (2 B) and dQ (4 B) per row: 2 MiB a head; 40 MB of 50 MB.
    assert ts.section_heads(256, 2048 * 128 * 8, H100_L2, ts.BACKWARD_L2_SHARE) == 16  # 20 fit
    assert ts.section_heads(4, 2048 * 128 * 8, H100_L2, ts.BACKWARD_L2_SHARE) == 4  # no more than there are
    assert ts.section_heads(32, 64 * 2**20, H100_L2, ts.BACKWARD_L2_SHARE) == 1  # one head already overflows


def test_not_causal_goes_head_by_head():
    assert ts.plan(16, 256, 2**20, H100_L2, 0.8, H100_SMS, False, True) == Schedule(1, False)


def _heads_in_flight(schedule, n_blocks, bh, programs):
    """Most heads among any `programs` consecutive tiles: the heads whose data is live at once."""
    heads = [ts.tile(t, n_blocks, bh, *schedule)[0] for t in range(n_blocks * bh)]
    return max(len(set(heads[i:i + programs])) for i in range(0, len(heads), programs // 2))


# The bench grid at 32768 tokens (docs/perf-notes.md): (what, n_blocks, batch·heads, bytes a head, share).
GRID = [
    ("fwd D64 N2048 (192-row tiles)", 11, 16 * 32, 2 * 2048 * 64 * 2, ts.FORWARD_L2_SHARE),
    ("fwd D64 N4096", 22, 8 * 32, 2 * 4096 * 64 * 2, ts.FORWARD_L2_SHARE),
    ("fwd D128 N2048 (128-row tiles)", 16, 16 * 16, 2 * 2048 * 128 * 2, ts.FORWARD_L2_SHARE),
    ("fwd D128 N4096", 32, 8 * 16, 2 * 4096 * 128 * 2, ts.FORWARD_L2_SHARE),
    ("bwd D64 N2048 (128-key blocks)", 16, 16 * 32, 2048 * 64 * 8, ts.BACKWARD_L2_SHARE),
    ("bwd D128 N2048", 16, 16 * 16, 2048 * 128 * 8, ts.BACKWARD_L2_SHARE),
    ("bwd D128 N8192", 64, 4 * 16, 8192 * 128 * 8, ts.BACKWARD_L2_SHARE),
    ("bwd D128 N16384", 128, 2 * 16, 16384 * 128 * 8, ts.BACKWARD_L2_SHARE),
]


@pytest.mark.parametrize("what,n_blocks,bh,head_bytes,share", GRID, ids=[g[0] for g in GRID])
def test_causal_plan_balances_programs_and_keeps_data_in_l2(what, n_blocks, bh, head_bytes, share):
    schedule = ts.plan(n_blocks, bh, head_bytes, H100_L2, share, H100_SMS, True, True)
    # Work is even: no program more than 7% above the mean (a static round robin cannot do better
    # than a tile's length over the programs' share).
    assert ts.largest_share(n_blocks, bh, H100_SMS, schedule) < 1.07
    # A section's data fits in its share of L2; the tiles in flight span the heads that hold that
    # many tiles plus a section at each end, and those heads' data fits in L2,
    assert schedule.section * head_bytes <= share * H100_L2 or schedule.section == 1
    in_flight = _heads_in_flight(schedule, n_blocks, bh, H100_SMS)
    assert in_flight <= -(-H100_SMS // n_blocks) + 2 * schedule.section
    assert in_flight * head_bytes <= H100_L2
    # where the old order (rank by rank over every head) had a program per head in flight.
    assert _heads_in_flight(Schedule(bh, False), n_blocks, bh, H100_SMS) >= min(bh, H100_SMS // 2)


def test_snake_breaks_the_resonance_of_round_robin():
    """D64 N2048 forward: 11 blocks a head and 132 = 12 · 11 programs; a straight order with
    sections of 32 heads gives some programs only long blocks, the snaked one evens them out."""
    straight = ts.largest_share(11, 512, H100_SMS, Schedule(32, False))
    snaked = ts.largest_share(11, 512, H100_SMS, Schedule(32, True))
    assert straight > 1.10 and snaked < 1.03
    assert ts.plan(11, 512, 2 * 2048 * 64 * 2, H100_L2, ts.FORWARD_L2_SHARE, H100_SMS, True, True).snake


def test_plan_takes_the_smallest_balanced_section():
    """D64 N2048 forward: sections of 1 or 2 heads resonate even snaked (132 programs, 11 and 22
    tiles a section: an even number of sections a round); 4 is the first that balances."""
    shares = {s: ts.largest_share(11, 512, H100_SMS, Schedule(s, True)) for s in (1, 2, 4)}
    assert shares[1] > 1.5 and shares[2] > 1.5 and shares[4] < ts.BALANCE
    assert ts.plan(11, 512, 2 * 2048 * 64 * 2, H100_L2, ts.FORWARD_L2_SHARE, H100_SMS, True, True) == Schedule(4, True)
    # D128 N2048: one head a section already balances.
    assert ts.plan(16, 256, 2 * 2048 * 128 * 2, H100_L2, ts.FORWARD_L2_SHARE, H100_SMS, True, True) == Schedule(1, True)


def test_grid_makespan_by_hand():
    """Two slots, 2 heads of 3 key blocks, work 1 + blocks visited: 4, 3, 2 a head. Head by head the
    second head's longest tile starts at 4 (slot A) and the run ends at 10 over a mean of 9; a section
    of both heads pairs the longest tiles and ends at 9."""
    assert ts.grid_makespan(3, 2, 2, Schedule(1, False)) == pytest.approx(10 / 9)
    assert ts.grid_makespan(3, 2, 2, Schedule(2, False)) == pytest.approx(1.0)
    # repeat weighs the visited blocks: works 1 + 2·(3, 2, 1) = 7, 5, 3 a head; head by head the slots end
    # their tiles at A 7, B 5, B 8, A 14, B 13, B 16, over a mean of 15.
    assert ts.grid_makespan(3, 2, 2, Schedule(1, False), repeat=2) == pytest.approx(16 / 15)


def test_one_program_per_tile_without_an_sm_count_goes_head_by_head():
    head_bytes = 2 * 2048 * 64 * 2
    for programs in (11 * 512, H100_SMS):
        assert ts.plan(11, 512, head_bytes, H100_L2, ts.FORWARD_L2_SHARE, programs, True, False) == Schedule(1, False)
    assert ts.plan(32, 8, head_bytes, H100_L2, ts.FORWARD_L2_SHARE, 256, False, False, H100_SMS) == Schedule(1, False)


def test_a_grid_of_few_long_programs_takes_sections():
    """Llama-3-8B's backward at batch 1, N4096: 8 K/V heads of 32 key blocks, each program walking 4 query
    heads of 64 query tiles (repeat 4 · 128/64). Head by head, the last heads' longest programs start after
    the first wave and the run ends at 1.59x the mean work; sections of 4 heads fill the 132 SMs evenly.
    Measured on the H100 (docs/perf-notes.md, "Causal grids of few long programs"): 302 -> 396 TFLOP/s."""
    grid = dict(n_blocks=32, bh=8, slots=H100_SMS, repeat=8.0)
    assert ts.grid_makespan(**grid, schedule=Schedule(1, False)) > 1.5
    schedule = ts.plan(32, 8, 16 * 2**20, H100_L2, ts.BACKWARD_L2_SHARE, 256, True, False, H100_SMS, 8.0)
    assert schedule == Schedule(4, False)
    assert ts.grid_makespan(**grid, schedule=schedule) < 1.01


@pytest.mark.parametrize("n_blocks,bh,repeat", [(128, 8, 8.0), (64, 32, 2.0), (16, 256, 2.0), (32, 32, 1.0),
                                                (43, 128, 1.0), (128, 64, 2.0), (1, 3, 1.0)])
def test_grid_sections_stay_within_one_wave_of_heads_and_near_the_best(n_blocks, bh, repeat):
    """No more heads in flight than head by head has (a section spans at most the heads one wave of
    programs covers), and the chosen order within GRID_TOLERANCE of the best candidate's makespan."""
    schedule = ts.plan(n_blocks, bh, 1, H100_L2, ts.BACKWARD_L2_SHARE, n_blocks * bh, True, False, H100_SMS, repeat)
    wave_heads = min(bh, -(-H100_SMS // n_blocks))
    assert not schedule.snake and 1 <= schedule.section <= wave_heads
    spans = [ts.grid_makespan(n_blocks, bh, H100_SMS, Schedule(1 << i, False), repeat)
             for i in range(wave_heads.bit_length())]
    assert ts.grid_makespan(n_blocks, bh, H100_SMS, schedule, repeat) <= min(spans) * ts.GRID_TOLERANCE


# split_tail: the last wave's tiles cut by keys (the forward's split_tail config).
def test_split_tail_cuts_the_last_wave_of_the_grids_head_dim_128_shapes():
    """4,096 query tiles of 128 rows (every head_dim 128 shape of the 32768-token grid) on 132 SMs: 31 full waves,
    and the 4 tiles left each cut into 32 chunks of 2 key tiles (N 8192), so no program takes more than 31 tiles and
    one chunk, against 32 tiles without the cut."""
    split = ts.split_tail(4096, H100_SMS, 64)
    assert split == ts.SplitTail(full=4092, tail=4, splits=32, chunk=2)
    assert split.items == 4092 + 4 * 32
    assert ts.split_tail(4096, H100_SMS, 16) == ts.SplitTail(4092, 4, 16, 1)  # N 2048: a key tile a chunk


@pytest.mark.parametrize("total,programs,key_tiles", [
    (264, 132, 64),  # no partial wave
    (100, 132, 64),  # one wave, short
    (132 + 70, 132, 64),  # more than half a wave left: a chunk would be half a tile or more
    (4096, 132, 1),  # one key tile: nothing to cut
])
def test_split_tail_leaves_launches_it_cannot_shorten(total, programs, key_tiles):
    assert ts.split_tail(total, programs, key_tiles) is None


@pytest.mark.parametrize("total,programs,key_tiles", [(4096, 132, 64), (144, 132, 8), (165, 132, 33), (150, 132, 3),
                                                       (133, 132, 7), (4096, 132, 128)])
def test_work_items_cover_every_key_tile_once_and_shorten_the_longest_program(total, programs, key_tiles):
    """Every (tile, key tile) in exactly one item, each chunk within its tile; and, were program p to take items p,
    p + programs, ... (the whole tiles' launch does; the chunks' launch gives each chunk its own program, which the
    hardware places as SMs free up), the busiest one's key tiles fall below ceil(total / programs) whole tiles'."""
    split = ts.split_tail(total, programs, key_tiles)
    assert split is not None
    seen, load = [], [0] * programs
    for w in range(split.items):
        tile, first, n, chunk = ts.work_item(w, split, key_tiles)
        assert n >= 1 and first + n <= key_tiles and (chunk == -1) == (w < split.full)
        seen += [(tile, j) for j in range(first, first + n)]
        load[w % programs] += n
    assert sorted(seen) == list(itertools.product(range(total), range(key_tiles)))
    assert max(load) < -(-total // programs) * key_tiles
    assert max(load) <= total // programs * key_tiles + split.chunk
