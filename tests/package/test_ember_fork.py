"""Fork safety: a child forked after ember was used refuses ember, with CUDA's advice (use 'spawn').

Each scenario runs in a fresh interpreter (a subprocess), so the forks happen in a process whose
history the test controls.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SPAWN_ADVICE = "you must use the 'spawn' start method"


def run(code: str, tmp_path: Path) -> str:
    # A file, not `python -c`: a 'spawn' child imports the parent's main module by its path.
    script = tmp_path / "scenario.py"
    script.write_text(textwrap.dedent(code))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_fork_before_use_is_fine_after_use_refused_naming_ember_and_spawn_and_spawn_works(
    tmp_path: Path,
) -> None:
    out = run(
        """
        import multiprocessing as mp
        import torch, torch_ember

        def use_ember(queue):
            try:
                queue.put((torch.ones(2, device="ember") * 2).cpu().tolist())
            except RuntimeError as error:
                queue.put(str(error).splitlines()[0])
            queue.put(torch.ember._is_in_bad_fork())

        def in_child(method):
            context = mp.get_context(method)
            queue = context.Queue()
            process = context.Process(target=use_ember, args=(queue,))
            process.start()
            result, bad_fork = queue.get(timeout=90), queue.get(timeout=90)
            process.join(60)
            return result, bad_fork, process.exitcode

        if __name__ == "__main__":
            print("BEFORE USE", *in_child("fork"))
            x = torch.ones(2, device="ember")  # ember is used in the parent from here on
            print("AFTER USE", *in_child("fork"))
            print("SPAWN", *in_child("spawn"))
            print("PARENT", (x + 1).cpu().tolist(), torch.ember._is_in_bad_fork())
        """,
        tmp_path,
    )
    lines = {line.split(" [")[0].split(" Cannot")[0]: line for line in out.splitlines()}
    assert lines["BEFORE USE"] == "BEFORE USE [2.0, 2.0] False 0", out
    after = lines["AFTER USE"]
    assert "Cannot re-initialize ember in forked subprocess" in after, out
    assert SPAWN_ADVICE in after
    assert after.endswith(" True 0")  # in a bad fork; the inherited tensors are left alone at exit
    assert lines["SPAWN"] == "SPAWN [2.0, 2.0] False 0", out
    assert lines["PARENT"] == "PARENT [2.0, 2.0] False", out


def test_a_dataloader_with_forked_workers_works_after_ember_was_used(tmp_path: Path) -> None:
    out = run(
        """
        import torch, torch_ember
        from torch.utils.data import DataLoader, TensorDataset

        model = torch.nn.Linear(4, 2).to("ember")  # ember is used before the workers fork
        data = TensorDataset(torch.arange(32.0).view(8, 4), torch.arange(8))
        loader = DataLoader(data, batch_size=2, num_workers=2, multiprocessing_context="fork")
        total = 0.0
        for inputs, _labels in loader:
            total += model(inputs.to("ember")).sum().item()  # the workers stay on the CPU
        expected = model(data.tensors[0].to("ember")).sum().item()
        print("BATCHES", len(loader), "SAME", abs(total - expected) < 1e-3)
        """,
        tmp_path,
    )
    assert "BATCHES 4 SAME True" in out
