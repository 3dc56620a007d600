"""book.torchrun / book.run_ranks: a worker script on several ranks, its output in rank order."""

from __future__ import annotations

import pytest

from book.run.distributed import Rank, Ranks, run_ranks, torchrun

WORKER = """
import os
rank = int(os.environ["RANK"])
print("rank", rank, "of", os.environ["WORLD_SIZE"])
open(f"note{rank}.json", "w").write('{"rank": %d}' % rank)
if rank == 1:
    raise ValueError("rank 1 gives up")
if rank == 2:
    os._exit(3)  # dies without a word
"""


@pytest.fixture(scope="module")
def three_ranks() -> Ranks:
    return run_ranks(WORKER, nproc=3, script="worker.py", timeout=120)


def test_each_rank_prints_in_rank_order(three_ranks: Ranks) -> None:
    assert [rank.stdout for rank in three_ranks.ranks] == [f"rank {r} of 3\n" for r in range(3)]


def test_how_each_rank_ended(three_ranks: Ranks) -> None:
    ok, raised, died = three_ranks.ranks
    assert ok.ok and ok.status == 0 and ok.error == ""
    assert raised.status == 1 and raised.error == "ValueError: rank 1 gives up"
    assert 'File "worker.py", line 7' in raised.stderr  # tracebacks name the script, not a path
    assert died.status is None and not three_ranks.ok
    assert str(three_ranks).splitlines() == [
        "[rank 0]",
        "rank 0 of 3",
        "[rank 1]",
        "rank 1 of 3",
        "failed: ValueError: rank 1 gives up",
        "[rank 2]",
        "rank 2 of 3",
        "ended without a word: the process died",
    ]


def test_files_the_worker_wrote_come_back(three_ranks: Ranks) -> None:
    assert three_ranks.files == {f"note{r}.json": f'{{"rank": {r}}}' for r in range(3)}


def test_a_rank_that_hangs_is_stopped() -> None:
    stuck = run_ranks("import time\ntime.sleep(60)\n", nproc=1, timeout=4)
    assert stuck.timed_out and stuck.ranks[0].status is None
    assert str(stuck).endswith("[stopped: the ranks did not finish in time]")


def test_torchrun_sets_the_rendezvous() -> None:
    code = (
        'import os\nprint(os.environ["RANK"], os.environ["LOCAL_WORLD_SIZE"], "MASTER_PORT" in os.environ)\n'
    )
    ran = torchrun(code, nproc=2, timeout=120)
    assert ran.ok, str(ran)
    assert [rank.stdout for rank in ran.ranks] == ["0 2 True\n", "1 2 True\n"]


def test_long_lines_are_wrapped_to_the_page() -> None:
    ranks = Ranks([Rank(0, "x " * 100, "", 0)])
    assert max(len(line) for line in str(ranks).splitlines()) <= 88


def test_a_rank_killed_by_a_signal_says_which() -> None:
    code = "import os, signal\nif os.environ['RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    ran = run_ranks(code, nproc=2, timeout=120)
    assert [rank.signal for rank in ran.ranks] == [None, "SIGKILL"]
    assert str(ran).splitlines()[-1] == "ended without a word: killed by SIGKILL"
