"""Chapter 17's pictures of eccl (book/display/widgets/eccl.py): the figures follow the C++'s constants and
loops, and the ring's steps, replayed, all-reduce."""

from __future__ import annotations

import re

from book.display.widgets import eccl
from book.paths import CSRC


def test_the_constants_are_the_headers() -> None:
    header = (CSRC / "distributed" / "EcclLink.h").read_text()
    k = eccl.link_constants()
    assert f"constexpr int kSlots = {k.slots};" in header
    assert f"constexpr int kMaxRanks = {k.max_ranks};" in header
    assert re.search(r"constexpr size_t kChunkBytes = 1024 \* 1024;", header) and k.chunk_bytes == 2**20


def test_replaying_the_ring_steps_reduces_every_block_on_every_rank() -> None:
    for world in range(2, 6):
        # held[r][b]: the set of ranks whose block b rank r's copy holds the sum of.
        held = [[{r} for _ in range(world)] for r in range(world)]
        for _name, row in eccl.ring_steps(world):
            sent = [set(held[r][send]) for r, (send, _recv, _what) in enumerate(row)]
            for r, (_send, recv, what) in enumerate(row):
                prev = (r - 1) % world
                assert row[prev][0] == recv  # what a rank receives is what the previous one sent
                if what.startswith("adds"):
                    assert not held[r][recv] & sent[prev]  # nothing is added twice
                    held[r][recv] = held[r][recv] | sent[prev]
                else:
                    held[r][recv] = sent[prev]
            # the fused step's second receive: rank r gets block r, which rank r - 1 just completed
            if "all-gather 1" in _name:
                for r in range(world):
                    held[r][r] = set(held[(r - 1) % world][r])
        assert all(held[r][b] == set(range(world)) for r in range(world) for b in range(world)), world


def test_costs_follow_the_formulas() -> None:
    chunk = eccl.link_constants().chunk_bytes
    one, ring = eccl.one_shot_cost(16 * chunk, 4), eccl.ring_cost(16 * chunk, 4)
    assert (one.handoffs, one.read_bytes) == (16, 3 * 16 * chunk)
    assert (ring.handoffs, ring.read_bytes) == (2 * 3 * 4, 2 * 3 * 4 * chunk)
    assert eccl.one_shot_cost(4096, 2).handoffs == 1 and eccl.ring_cost(4096, 2).handoffs == 2
    table = eccl.costs_table([4096, chunk], [2])
    assert table.splitlines()[2].endswith("one-shot") and table.splitlines()[3].endswith("ring")
    assert max(len(line) for line in table.splitlines()) <= 88


def test_pictures_render_as_text_and_html() -> None:
    for view in (eccl.LinkPicture(3), eccl.RingPicture(4)):
        assert "<script" not in view.html() and "<svg" not in view.html()
        assert max(len(line) for line in view.text().splitlines()) <= 88
    assert "channel 2→1" in eccl.LinkPicture(3).text()
