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

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import distributed_worker as worker  # noqa: E402

# name: (scenario, world size, extra environment)
JOBS: dict[str, tuple[str, int, dict[str, str]]] = {
    "collectives": ("collectives", 2, {}),
    "collectives_ring": ("collectives_ring", 3, {"EMBER_ECCL_ALGO": "ring"}),
    "killed": ("killed", 2, {"EMBER_ECCL_ALGO": "one_shot"}),
    "stalled": ("stalled", 2, {"EMBER_ECCL_ALGO": "one_shot"}),
}
JOB_LIMIT_S = 150  # a job's whole run, far above its normal time: hitting it is a hang


@dataclass
class Job:
    name: str
    scenario: str
    world: int
    directory: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    results: list[dict[str, dict[str, object]]] | None = None
    timed_out: bool = False

    def start(self, env: dict[str, str]) -> None:
        store = self.directory / "store"
        for rank in range(self.world):
            log = open(self.directory / f"rank{rank}.log", "wb")  # noqa: SIM115 (the child owns it)
            args = [
                sys.executable,
                str(HERE / "distributed_worker.py"),
                self.scenario,
                str(rank),
                str(self.world),
                str(store),
                str(self.directory),
            ]
            self.processes.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env))
            log.close()

    def finish(self, deadline: float) -> Job:
        if self.results is None:
            for process in self.processes:
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.timed_out = True
            for process in self.processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGKILL)
                    process.wait()
            self.results = []
            for rank in range(self.world):
                path = self.directory / f"rank{rank}.json"
                self.results.append(json.loads(path.read_text()) if path.exists() else {})
        return self

    def log(self, rank: int) -> str:
        return (self.directory / f"rank{rank}.log").read_text(errors="replace")[-4000:]

    def pids(self) -> list[str]:
        assert self.results is not None
        return [str(r.get("__pid__", {}).get("detail", "?")) for r in self.results]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Job]]:
    base = tmp_path_factory.mktemp("eccl")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE"))}
    env.setdefault("OMP_NUM_THREADS", "1")
    started: dict[str, Job] = {}
    for name, (scenario, world, extra) in JOBS.items():
        directory = base / name
        directory.mkdir()
        started[name] = Job(name, scenario, world, directory)
        started[name].start({**env, **extra})
    deadline = time.monotonic() + JOB_LIMIT_S
    for job in started.values():
        job.deadline = deadline  # type: ignore[attr-defined]
    yield started
    for job in started.values():
        job.finish(time.monotonic())


def finished(jobs: dict[str, Job], name: str) -> Job:
    job = jobs[name]
    return job.finish(job.deadline)  # type: ignore[attr-defined]


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
    job = finished(jobs, job_name)
    problems = []
    for rank in survivors(job):
        result = job.results[rank].get(check)
        if result is None:
            problems.append(
                f"rank {rank} never ran it (timed out: {job.timed_out}); its log:\n{job.log(rank)}"
            )
        elif not result["ok"]:
            problems.append(f"rank {rank}:\n{result['detail']}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("job_name", list(JOBS))
def test_job_ends_cleanly_and_leaves_no_link_in_dev_shm(jobs: dict[str, Job], job_name: str) -> None:
    job = finished(jobs, job_name)
    assert not job.timed_out, f"{job_name} hung: killed after {JOB_LIMIT_S} s"
    codes = [p.returncode for p in job.processes]
    expected = [0] * job.world
    if job.scenario == "killed":
        expected[-1] = -signal.SIGKILL
    assert codes == expected, "\n".join(job.log(r) for r in range(job.world))
    pids = job.pids()
    left = [
        p.name
        for p in Path("/dev/shm").iterdir()
        if p.name.startswith("ember-eccl-") and p.name.split("-")[2] in pids
    ]
    assert not left, f"left in /dev/shm: {left}"


def test_every_check_of_every_job_is_named_once() -> None:
    for scenario, world, _ in JOBS.values():
        names = worker.check_names(scenario, world)
        assert len(names) == len(set(names)), scenario
