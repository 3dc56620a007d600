"""eccl, the torch.distributed backend of torch_ember, in real multi-process groups.

Starting a process costs seconds (importing torch), so the tests do not start one per assertion: each
scenario is one job of N rank processes (distributed_worker.py) that run many checks and report each as
JSON, and the tests below are parametrized over those checks. Every job starts when the module does, so
the jobs' sleeps and timeouts overlap; each has a hard time limit, after which its ranks are killed and
its tests fail (nothing here can hang pytest).

- collectives (2 ranks, default algorithms: one-shot, and the ring past 4 MiB) and collectives_ring (3 ranks,
  EMBER_ECCL_ALGO=ring): every collective and dtype, small and several MiB, eccl on ember tensors against
  gloo on the same CPU tensors in one "cpu:gloo,ember:eccl" group. The 2-rank job goes on with async work
  against the streams and refusals on the host, then makes the default group again with
  `init_process_group(device_id=...)` alone (nothing but `import torch_ember` registered eccl) and trains
  with DDP and FSDP2 against one process on the full batch; both jobs end with ranks that disagree.
- killed and stalled (2 ranks, EMBER_ECCL_ALGO=one_shot, `init_process_group("eccl", timeout=...)`): large
  one-shot all_reduces, then a rank dies or stalls inside one, and the other raises, naming the collective,
  instead of hanging.
After every job, /dev/shm holds none of its links.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import distributed_worker as worker  # noqa: E402
from rank_jobs import Job, rank_environment  # noqa: E402

# name: (scenario, world size, extra environment)
JOBS: dict[str, tuple[str, int, dict[str, str]]] = {
    "collectives": ("collectives", 2, {}),
    "collectives_ring": ("collectives_ring", 3, {"EMBER_ECCL_ALGO": "ring"}),
    "killed": ("killed", 2, {"EMBER_ECCL_ALGO": "one_shot"}),
    "stalled": ("stalled", 2, {"EMBER_ECCL_ALGO": "one_shot"}),
}
JOB_LIMIT_S = 150  # a job's whole run, far above its normal time: hitting it is a hang


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Job]]:
    base = tmp_path_factory.mktemp("eccl")
    started: dict[str, Job] = {}
    for name, (scenario, world, extra) in JOBS.items():
        (base / name).mkdir()
        job = Job(HERE / "distributed_worker.py", scenario, world, base / name)
        started[name] = job.start(rank_environment(**extra), JOB_LIMIT_S)
    yield started
    for job in started.values():
        job.finish(time.monotonic())


def survivors(job: Job) -> list[int]:
    """The ranks that must finish: all but the one a `killed` job kills."""
    return list(range(job.world - 1)) if job.scenario == "killed" else list(range(job.world))


CASES = [
    pytest.param(job, check, id=f"{job}:{check}")
    for job, (scenario, world, _) in JOBS.items()
    for check in worker.check_names(scenario, world)
]


@pytest.mark.parametrize(("job_name", "check"), CASES)
def test_check(jobs: dict[str, Job], job_name: str, check: str) -> None:
    job = jobs[job_name].finish()
    problems = job.problems(check, survivors(job))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("job_name", list(JOBS))
def test_job_ends_cleanly_and_leaves_no_link_in_dev_shm(jobs: dict[str, Job], job_name: str) -> None:
    job = jobs[job_name].finish()
    expected = [0] * job.world
    if job.scenario == "killed":
        expected[-1] = -signal.SIGKILL
    job.assert_ended(expected, JOB_LIMIT_S)


def test_every_check_of_every_job_is_named_once() -> None:
    for scenario, world, _ in JOBS.values():
        names = worker.check_names(scenario, world)
        assert len(names) == len(set(names)), scenario
