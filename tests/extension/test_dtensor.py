"""DTensor, tensor parallelism, FSDP2 over tensor parallelism and distributed checkpoints on eccl.

As test_distributed.py does, each scenario is one job of rank processes (dtensor_worker.py) that runs many
checks and reports each as JSON; both jobs start when the module does and run side by side, each with a
hard time limit after which its ranks are killed and its checks fail. The references: the same DTensor
calls on a CPU mesh over gloo, in the same processes, and the unsharded model in one process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dtensor_worker as worker  # noqa: E402

JOBS = {"mesh": 4}  # scenario: world size
JOB_LIMIT_S = 180  # both jobs' whole run, far above their normal time: hitting it is a hang


class Job:
    def __init__(self, scenario: str, world: int, directory: Path, env: dict[str, str]) -> None:
        self.scenario, self.world, self.directory = scenario, world, directory
        self.results: list[dict[str, dict[str, object]]] | None = None
        self.timed_out = False
        self.processes = []
        for rank in range(world):
            args = [str(HERE / "dtensor_worker.py"), scenario, str(rank), str(world)]
            args += [str(directory / "store"), str(directory)]
            with open(directory / f"rank{rank}.log", "wb") as log:
                self.processes.append(
                    subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, env=env)
                )

    def finish(self, deadline: float) -> Job:
        if self.results is None:
            for process in self.processes:
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.timed_out = True
                    process.send_signal(signal.SIGKILL)
                    process.wait()
            self.results = []
            for rank in range(self.world):
                path = self.directory / f"rank{rank}.json"
                self.results.append(json.loads(path.read_text()) if path.exists() else {})
        return self

    def log(self, rank: int) -> str:
        return (self.directory / f"rank{rank}.log").read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Job]]:
    base = tmp_path_factory.mktemp("dtensor")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_"))
    }
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    started = {}
    for scenario, world in JOBS.items():
        (base / scenario).mkdir()
        started[scenario] = Job(scenario, world, base / scenario, env)
    deadline = time.monotonic() + JOB_LIMIT_S
    yield _Lazy(started, deadline)
    for job in started.values():
        job.finish(time.monotonic())


class _Lazy(dict):
    """The jobs, each waited for when a test first asks for it."""

    def __init__(self, jobs: dict[str, Job], deadline: float) -> None:
        super().__init__(jobs)
        self.deadline = deadline

    def __getitem__(self, name: str) -> Job:
        return super().__getitem__(name).finish(self.deadline)


CASES = [
    pytest.param(scenario, check, id=f"{scenario}:{check}")
    for scenario in JOBS
    for check in worker.check_names(scenario)
]


@pytest.mark.parametrize(("scenario", "check"), CASES)
def test_check(jobs: dict[str, Job], scenario: str, check: str) -> None:
    job = jobs[scenario]
    assert job.results is not None
    # After the 2-rank checkpoint, rank 0 alone loads it: the other rank has nothing to report there.
    ranks = [0] if check == "checkpoint_on_one_rank" else range(job.world)
    problems = []
    for rank in ranks:
        result = job.results[rank].get(check)
        if result is None:
            problems.append(
                f"rank {rank} never ran it (timed out: {job.timed_out}); its log:\n{job.log(rank)}"
            )
        elif not result["ok"]:
            problems.append(f"rank {rank}:\n{result['detail']}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("scenario", list(JOBS))
def test_job_ends_cleanly_and_leaves_no_link_in_dev_shm(jobs: dict[str, Job], scenario: str) -> None:
    # Every group's link, the subgroups' split from the default group included, is gone.
    job = jobs[scenario]
    assert job.results is not None
    assert not job.timed_out, f"{scenario} hung: killed after {JOB_LIMIT_S} s"
    codes = [p.returncode for p in job.processes]
    assert codes == [0] * job.world, "\n".join(job.log(r) for r in range(job.world))
    pids = [str(r.get("__pid__", {}).get("detail", "?")) for r in job.results]
    left = [
        p.name
        for p in Path("/dev/shm").iterdir()
        if p.name.startswith("ember-eccl-") and p.name.split("-")[2] in pids
    ]
    assert not left, f"left in /dev/shm: {left}"
