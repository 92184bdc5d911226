"""How the cost model counts an implementation: the declaration each registry entry carries.

Pure data (no torch), so the cost model and the dashboard read it without loading any kernel; the
registry (profiler.registry) declares each implementation's costing in these terms.
``profiler.model.cost.cost_of`` turns a :class:`Costing`, a shape and a step into FLOPs and
bytes; every command (capture, model, validate, remodel, the plots and the report) goes through it.

Kinds:
- ``stepwise``: unfused attention whose four steps (QKᵀ, scale/mask, softmax, PV) each make a trip
  through HBM and are timed one by one (kernels.reference). Rows: ``total`` and one per step.
- ``unfused``: the same four trips inside one call that cannot be split (SDPA's math backend).
- ``fused``: one kernel (three for a backward) that keeps the N×N scores on chip. Its ``tiles``
  say which query and key blocks it iterates, which sets the K/V re-reads that L2 serves.
- ``per_row``: fused, but one program per query row: every row re-reads the K and V it sees.

Two flags refine a kind: ``split_kv`` (the forward takes FlashDecoding's split-KV path when
attention_core.split_kv.plan says so: partials are written and read back) and ``repeats_kv`` (with
grouped-query attention, K and V are first expanded to every query head with repeat_interleave,
a copy the bytes include). ``fast_path`` names second kernels that run on some devices (our Gluon
kernels on sm_90); the row's ``path`` column, recorded when the case ran, says which pass took one
(:func:`pass_paths`), and that pass's tile then comes from ``fast_fwd_tile`` (forward) or
``fast_bwd_tile`` (a one-pass backward, :attr:`Tiles.onepass`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

KINDS = ("stepwise", "unfused", "fused", "per_row")
Tile = tuple[int, int]  # (BLOCK_M query rows, BLOCK_N key columns)


@dataclass(frozen=True)
class Tiles:
    """The tiles a fused kernel runs with; None where it is not known (then the model gives no tile
    bytes for that pass rather than a guess)."""

    fwd: Tile | None
    dkdv: Tile | None = None  # backward, key-stationary kernel (dK, dV)
    dq: Tile | None = None  # backward, query-stationary kernel (dQ)
    # Backward in one key-stationary kernel that adds dQ into an fp32 buffer (FlashAttention-2's and
    # -3's structure): (query rows per step, keys per program). When set, it is the backward's tile.
    onepass: Tile | None = None


def pass_paths(path: str, mode: str) -> tuple[str, str]:
    """(forward path, backward path) of a row's ``path`` column: 'X fwd, Y bwd' on fwd+bwd rows,
    the whole path on a fwd or a bwd row ('' for the pass that did not run)."""
    if path.endswith(" bwd") and " fwd, " in path:
        forward, backward = path[: -len(" bwd")].split(" fwd, ", 1)
        return forward, backward
    return {"fwd": (path, ""), "bwd": ("", path)}.get(mode, (path, path))


@dataclass(frozen=True)
class Costing:
    kind: str
    # Fixed tiles, or a function of (head_dim, dtype name) when the kernel picks its tile by shape.
    tiles: Tiles | Callable[[int, str], Tiles] | None = None
    writes_lse: bool = True  # the forward writes one fp32 logsumexp per query row
    source: str = ""  # where the tiles come from (kernel source, kernel name, counters)
    split_kv: bool = False  # the forward splits the keys when split_kv.plan gives a plan
    repeats_kv: bool = False  # GQA inputs are expanded with repeat_interleave before attention
    # Second kernels some devices run instead (the row's ``path`` names them, e.g. 'gluon-ws'), and
    # their tiles: the forward's as a function of (head_dim, dtype name, causal, seq_q), called with all four
    # (a two-argument function raises TypeError), the one-pass backward's of (head_dim, dtype name).
    fast_path: str = ""
    fast_fwd_tile: Callable[[int, str, bool, int | None], Tile | None] | None = None
    fast_bwd_tile: Callable[[int, str], Tile | None] | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"costing kind '{self.kind}' is not one of {', '.join(KINDS)}")

    @property
    def fused(self) -> bool:
        return self.kind in ("fused", "per_row")

    def tiles_for(self, head_dim: int, dtype: str, path: str = "", mode: str = "fwd", causal: bool = False,
                  seq_q: int | None = None) -> Tiles | None:
        """The tiles of this problem; where a row's ``path`` (of a ``mode`` row) names
        :attr:`fast_path` for a pass, that pass's tile is the fast kernel's (the forward's may depend on the
        mask and on ``seq_q``, the query rows: None for a long row)."""
        tiles = self.tiles(head_dim, dtype) if callable(self.tiles) else self.tiles
        if not self.fast_path:
            return tiles
        forward, backward = pass_paths(path, mode)
        if self.fast_path in forward and self.fast_fwd_tile is not None:
            tiles = replace(tiles or Tiles(None), fwd=self.fast_fwd_tile(head_dim, dtype, causal, seq_q))
        if self.fast_path in backward and self.fast_bwd_tile is not None:
            tiles = replace(tiles or Tiles(None), onepass=self.fast_bwd_tile(head_dim, dtype))
        return tiles

    def tiles_of(self, shape, path: str = "") -> Tiles | None:
        """:meth:`tiles_for` a shape (attention_core.shape.Shape) whose row took ``path``: its head_dim, dtype,
        mode, mask and query rows."""
        return self.tiles_for(shape.head_dim, shape.dtype, path, shape.mode, shape.causal, shape.seq_q)

    def as_meta(self, extra_head_dims=(), dtypes=("fp16", "bf16", "fp32")) -> dict:
        """A JSON form for a capture's meta.json (user implementations: their costing travels with
        the capture, so ``remodel`` and the dashboard never import the user's code). Tiles that
        depend on the problem are stored as a table over the multiples of 8 up to 256 (and
        ``extra_head_dims``, e.g. the capture's own) × ``dtypes``."""
        stored = {"kind": self.kind, "writes_lse": self.writes_lse, "source": self.source,
                  "split_kv": self.split_kv, "repeats_kv": self.repeats_kv}
        if callable(self.tiles):
            head_dims = sorted({*range(8, 257, 8), *extra_head_dims})
            table = {f"{d}/{t}": _tiles_json(self.tiles(d, t)) for d in head_dims for t in dtypes}
            return stored | {"tiles_by": {k: v for k, v in table.items() if v is not None}}
        return stored | {"tiles": _tiles_json(self.tiles)}

    @classmethod
    def from_meta(cls, stored: dict) -> Costing:
        common = {"writes_lse": stored.get("writes_lse", True), "source": stored.get("source", ""),
                  "split_kv": stored.get("split_kv", False), "repeats_kv": stored.get("repeats_kv", False)}
        if "tiles_by" in stored:
            table = {key: _tiles_from_json(value) for key, value in stored["tiles_by"].items()}
            return cls(stored["kind"], lambda head_dim, dtype: table.get(f"{head_dim}/{dtype}"), **common)
        return cls(stored["kind"], _tiles_from_json(stored.get("tiles")), **common)


def _tiles_json(tiles: Tiles | None) -> dict | None:
    if tiles is None or (tiles.fwd is None and tiles.dkdv is None and tiles.dq is None and tiles.onepass is None):
        return None
    stored = {"fwd": tiles.fwd, "dkdv": tiles.dkdv, "dq": tiles.dq}
    return stored | ({"onepass": tiles.onepass} if tiles.onepass is not None else {})


def _tiles_from_json(stored: dict | None) -> Tiles | None:
    if stored is None:
        return None
    known = {f.name for f in fields(Tiles)}  # keys a later version adds are left out, not fatal
    return Tiles(**{k: tuple(v) if v else None for k, v in stored.items() if k in known})
