"""Jobs of rank processes for the multi-process tests (test_distributed.py, test_dtensor.py).

A job is one scenario of a worker script run by `world` rank processes, each started as
`WORKER SCENARIO RANK WORLD STORE_FILE DIRECTORY`, each writing its checks' results to
DIRECTORY/rank{R}.json (check name -> {"ok", "detail"}) and its output to rank{R}.log. Jobs start
when their test module does and run side by side; a job's ranks still running at its deadline are
killed, and the checks they did not report fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


def rank_environment(**extra: str) -> dict[str, str]:
    """This process's environment without a launcher's rank variables, one OpenMP thread per rank."""
    launcher = ("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)}
    env.setdefault("OMP_NUM_THREADS", "1")
    return {**env, **extra}


@dataclass
class Job:
    worker: Path
    scenario: str
    world: int
    directory: Path
    deadline: float = 0.0  # time.monotonic() past which its ranks are killed
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    results: list[dict[str, dict[str, object]]] | None = None
    timed_out: bool = False

    def start(self, env: dict[str, str], limit_s: float) -> Job:
        self.deadline = time.monotonic() + limit_s
        for rank in range(self.world):
            args = [str(self.worker), self.scenario, str(rank), str(self.world)]
            args += [str(self.directory / "store"), str(self.directory)]
            with open(self.directory / f"rank{rank}.log", "wb") as log:  # the child holds its own copy
                self.processes.append(
                    subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, env=env)
                )
        return self

    def finish(self, deadline: float | None = None) -> Job:
        """Waits for the ranks until `deadline` (the job's own by default), kills the rest, reads the results."""
        if self.results is None:
            until = self.deadline if deadline is None else deadline
            for process in self.processes:
                try:
                    process.wait(timeout=max(0.1, until - time.monotonic()))
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

    def problems(self, check: str, ranks: list[int] | range) -> list[str]:
        """What went wrong with `check` on each of `ranks`: never reported, or failed."""
        assert self.results is not None
        found = []
        for rank in ranks:
            result = self.results[rank].get(check)
            if result is None:
                found.append(
                    f"rank {rank} never ran it (timed out: {self.timed_out}); its log:\n{self.log(rank)}"
                )
            elif not result["ok"]:
                found.append(f"rank {rank}:\n{result['detail']}")
        return found

    def assert_ended(self, codes: list[int], limit_s: float) -> None:
        """The job ended before its limit, its ranks with these exit codes, and left no eccl link in
        /dev/shm (named /ember-eccl-PID-...)."""
        assert self.results is not None
        assert not self.timed_out, f"{self.scenario} hung: killed after {limit_s} s"
        ended = [process.returncode for process in self.processes]
        assert ended == codes, "\n".join(self.log(rank) for rank in range(self.world))
        pids = [str(r.get("__pid__", {}).get("detail", "?")) for r in self.results]
        left = [
            p.name
            for p in Path("/dev/shm").iterdir()
            if p.name.startswith("ember-eccl-") and p.name.split("-")[2] in pids
        ]
        assert not left, f"left in /dev/shm: {left}"
