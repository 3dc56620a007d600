"""DTensor, tensor parallelism, FSDP2 over tensor parallelism and distributed checkpoints on eccl.

As test_distributed.py does, each scenario is one job of rank processes (dtensor_worker.py) that runs many
checks and reports each as JSON; both jobs start when the module does and run side by side, each with a
hard time limit after which its ranks are killed and its checks fail. The references: the same DTensor
calls on a CPU mesh over gloo, in the same processes, and the unsharded model in one process.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dtensor_worker as worker  # noqa: E402
from rank_jobs import Job, rank_environment  # noqa: E402

JOBS = {"mesh": 4}  # scenario: world size
JOB_LIMIT_S = 180  # both jobs' whole run, far above their normal time: hitting it is a hang


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Job]]:
    base = tmp_path_factory.mktemp("dtensor")
    env = rank_environment(TORCH_CPP_LOG_LEVEL="ERROR")
    started = {}
    for scenario, world in JOBS.items():
        (base / scenario).mkdir()
        started[scenario] = Job(HERE / "dtensor_worker.py", scenario, world, base / scenario).start(
            env, JOB_LIMIT_S
        )
    yield started
    for job in started.values():
        job.finish(time.monotonic())


CASES = [
    pytest.param(scenario, check, id=f"{scenario}:{check}")
    for scenario in JOBS
    for check in worker.check_names(scenario)
]


@pytest.mark.parametrize(("scenario", "check"), CASES)
def test_check(jobs: dict[str, Job], scenario: str, check: str) -> None:
    job = jobs[scenario].finish()
    # After the 2-rank checkpoint, rank 0 alone loads it: the other rank has nothing to report there.
    problems = job.problems(check, [0] if check == "checkpoint_on_one_rank" else range(job.world))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("scenario", list(JOBS))
def test_job_ends_cleanly_and_leaves_no_link_in_dev_shm(jobs: dict[str, Job], scenario: str) -> None:
    # Every group's link, the subgroups' split from the default group included, is gone.
    jobs[scenario].finish().assert_ended([0] * JOBS[scenario], JOB_LIMIT_S)
