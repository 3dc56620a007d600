"""One rank of a test_dtensor.py scenario: DTensor, tensor parallelism, FSDP2 and distributed checkpoints
on eccl, each check's result written as JSON.

Run as `python dtensor_worker.py SCENARIO RANK WORLD STORE_FILE OUT_DIR`, one process per rank, started
together (test_dtensor.py does it); the ranks meet through a FileStore at STORE_FILE. The result of every
check (ok, and the error's text) goes into OUT_DIR/rank<RANK>.json, rewritten after each check.

One scenario, "mesh": 4 ranks, two on each of a process's simulated devices (rank % 2), in a
"cpu:gloo,ember:eccl" group made with device_id, which binds it: DeviceMesh then splits its dimensions'
groups from it (EcclBackend::split, and gloo's). Starting a rank costs seconds (torch and its distributed
packages), so one job of 4 ranks runs every check:

- the same DTensor calls on an ember mesh (eccl) and a CPU mesh (gloo), equal;
- a tensor-parallel MLP against the unsharded one; a 2x2 mesh, and FSDP2 over tensor parallelism on it
  training as one process does;
- FSDP2 state saved with torch.distributed.checkpoint by each pair of ranks of the mesh's "dp" dimension
  (a 2-rank checkpoint per pair) and loaded back; then rank 0 alone, in a group of one, loads its pair's.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
import torch_ember  # noqa: F401 (registers the ember device and eccl)
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def mlp() -> MLP:
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    return MLP()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(12, 8, generator=g), torch.randn(12, 4, generator=g)


TP_PLAN = {"up": ColwiseParallel(), "down": RowwiseParallel()}


def full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: {m}")


def same(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert torch.equal(actual, expected), f"{what}: {actual} != {expected}"


class Ctx:
    def __init__(self, rank: int, world: int, out_dir: Path) -> None:
        self.rank, self.world, self.out_dir = rank, world, out_dir
        self.device = torch.device("ember", rank % torch.ember.device_count())

    def meshes(self) -> tuple[DeviceMesh, DeviceMesh]:
        return init_device_mesh("ember", (self.world,)), init_device_mesh("cpu", (self.world,))

    def mesh_2d(self) -> DeviceMesh:
        return init_device_mesh("ember", (2, 2), mesh_dim_names=("dp", "tp"))

    def placements(self) -> None:
        # Every placement and redistribution, on eccl and on gloo: the same local shards and full tensors.
        on_ember, on_cpu = self.meshes()
        whole = torch.arange(30.0).reshape(5, 6)  # 5 rows: Shard(0) is uneven

        def run(mesh: DeviceMesh) -> dict[str, torch.Tensor]:
            out: dict[str, torch.Tensor] = {}
            for p in (Shard(0), Shard(1), Replicate(), Partial()):
                d = distribute_tensor(whole, mesh, [p])
                out[f"{p} local"], out[f"{p} full"] = d.to_local().cpu(), full(d)
            s0 = distribute_tensor(whole, mesh, [Shard(0)])
            out["S0->S1"] = s0.redistribute(mesh, [Shard(1)]).to_local().cpu()
            out["S0->R"] = s0.redistribute(mesh, [Replicate()]).to_local().cpu()
            out["R->S1"] = (
                distribute_tensor(whole, mesh, [Replicate()]).redistribute(mesh, [Shard(1)]).to_local()
            )
            mine = whole.to(mesh.device_type) * (self.rank + 1)  # Partial: rank r holds (r + 1) x
            for reduce in ("sum", "avg", "max"):
                partial = DTensor.from_local(mine, mesh, [Partial(reduce)])
                out[f"P({reduce})->R"] = partial.redistribute(mesh, [Replicate()]).to_local().cpu()
                out[f"P({reduce})->S0"] = partial.redistribute(mesh, [Shard(0)]).to_local().cpu()
            product = distribute_tensor(whole, mesh, [Shard(0)]) @ distribute_tensor(
                whole.T, mesh, [Replicate()]
            )
            out["S0 @ R"] = full(product)
            out["sum of S1"] = full(distribute_tensor(whole, mesh, [Shard(1)]).sum())
            return {k: v.cpu() for k, v in out.items()}

        eccl, gloo = run(on_ember), run(on_cpu)
        assert eccl.keys() == gloo.keys()
        for key in eccl:
            same(eccl[key], gloo[key], key)
        for p in ("S(0)", "S(1)", "R", "P(sum)"):
            same(eccl[f"{p} full"], whole, p)
        same(eccl["P(sum)->R"], whole * sum(range(1, self.world + 1)), "P(sum)->R")
        same(eccl["P(max)->R"], whole * self.world, "P(max)->R")
        same(eccl["S0 @ R"], whole @ whole.T, "S0 @ R")

    def tensor_parallel(self) -> None:
        mesh = init_device_mesh("ember", (self.world,))
        reference, model = mlp(), parallelize_module(mlp().to(self.device), mesh, TP_PLAN)
        x, y = batch()
        out = model(x.to(self.device))
        close(out.cpu(), reference(x).detach(), "forward")
        F.mse_loss(out, y.to(self.device)).backward()
        F.mse_loss(reference(x), y).backward()
        sharded = {n: p.grad.placements for n, p in model.named_parameters()}
        assert sharded == {
            "up.weight": (Shard(0),),
            "up.bias": (Shard(0),),
            "down.weight": (Shard(1),),
            "down.bias": (Replicate(),),
        }, sharded
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            close(full(p.grad), q.grad, f"grad of {name}")

    def _fsdp(self, mesh: DeviceMesh) -> tuple[nn.Module, torch.optim.Optimizer]:
        model = mlp().to(self.device)
        fully_shard(model.up, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        return model, optimizer

    def _step(self, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int, world: int) -> None:
        x, y = batch()
        half = 12 // world
        mine = slice(rank * half, (rank + 1) * half)
        F.mse_loss(model(x[mine].to(self.device)), y[mine].to(self.device)).backward()
        optimizer.step()
        optimizer.zero_grad()

    def _state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
        """Every value of the model's and the optimizer's state, full, on the CPU, by a flat key."""
        model_state, optim_state = get_state_dict(model, optimizer)
        flat = {f"model.{k}": full(v) for k, v in model_state.items()}
        for name, state in optim_state["state"].items():
            flat.update({f"optim.{name}.{k}": full(torch.as_tensor(v)) for k, v in state.items()})
        return flat

    def checkpoint(self) -> None:
        # Each pair of the dp dimension (ranks 0 and 2, ranks 1 and 3) trains a step of FSDP2 on the pair and
        # saves its checkpoint; a fresh model and optimizer, stepped twice, load it back.
        dp = self.mesh_2d()["dp"]
        rank, pair = dp.get_local_rank(), self.rank % 2
        model, optimizer = self._fsdp(dp)
        self._step(model, optimizer, rank, 2)
        saved = self._state(model, optimizer)
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp.save(
            {"model": model_state, "optim": optim_state},
            checkpoint_id=self.checkpoint_dir(pair),
            process_group=dp.get_group(),
        )
        if rank == 0:
            torch.save(saved, self.checkpoint_dir(pair) / "saved.pt")

        fresh, fresh_optimizer = self._fsdp(dp)
        self._step(fresh, fresh_optimizer, rank, 2)
        self._step(fresh, fresh_optimizer, rank, 2)
        assert not torch.equal(
            self._state(fresh, fresh_optimizer)["model.up.weight"], saved["model.up.weight"]
        )
        self._load(fresh, fresh_optimizer, pair, dp.get_group())
        loaded = self._state(fresh, fresh_optimizer)
        assert loaded.keys() == saved.keys(), (sorted(loaded), sorted(saved))
        for key in saved:
            same(loaded[key], saved[key], key)

    def checkpoint_dir(self, pair: int) -> Path:
        return self.out_dir / f"checkpoint{pair}"

    def _load(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, pair: int, group: dist.ProcessGroup | None
    ) -> None:
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=self.checkpoint_dir(pair), process_group=group)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    def checkpoint_on_one_rank(self) -> None:
        # Ranks 0 and 2's checkpoint, loaded by rank 0 alone in a group of one: both shards read into one.
        dist.barrier()
        dist.destroy_process_group()
        if self.rank != 0:
            return
        dist.init_process_group("eccl", store=dist.HashStore(), rank=0, world_size=1)
        model, optimizer = self._fsdp(init_device_mesh("ember", (1,)))
        self._step(model, optimizer, 0, 1)
        self._load(model, optimizer, 0, None)
        saved = torch.load(self.checkpoint_dir(0) / "saved.pt")
        loaded = self._state(model, optimizer)
        assert loaded.keys() == saved.keys(), (sorted(loaded), sorted(saved))
        for key in saved:
            same(loaded[key], saved[key], key)
        assert model.up.weight.to_local().shape == (16, 8)  # one rank holds it whole

    def mesh_2d_groups(self) -> None:
        mesh = self.mesh_2d()
        for name in ("dp", "tp"):
            group = mesh.get_group(name)
            assert group._get_backend(self.device).name() == "eccl"
            assert dist.get_world_size(group) == 2
        x = torch.full((2,), float(self.rank), device=self.device)
        dist.all_reduce(x, group=mesh.get_group("tp"))
        expected = 1.0 if self.rank < 2 else 5.0  # tp groups: ranks {0, 1} and {2, 3}
        same(x.cpu(), torch.full((2,), expected), "all_reduce over tp")
        whole = torch.arange(24.0).reshape(4, 6)
        d = distribute_tensor(whole, mesh, [Shard(0), Shard(1)])
        assert d.to_local().shape == (2, 3)
        same(full(d), whole, "full_tensor of a 2-D sharding")

    def fsdp_over_tp(self) -> None:
        mesh = self.mesh_2d()
        reference = mlp()
        model = parallelize_module(mlp().to(self.device), mesh["tp"], TP_PLAN)
        fully_shard(model, mesh=mesh["dp"])
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        ref_optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
        x, y = batch()
        dp = mesh["dp"].get_local_rank()
        mine = slice(dp * 6, (dp + 1) * 6)  # the dp rank's half; the tp ranks share it
        for _ in range(2):
            F.mse_loss(model(x[mine].to(self.device)), y[mine].to(self.device)).backward()
            optimizer.step()
            optimizer.zero_grad()
            F.mse_loss(reference(x), y).backward()
            ref_optimizer.step()
            ref_optimizer.zero_grad()
        assert model.up.weight.placements[1] == Shard(0), model.up.weight.placements
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            close(full(p), q.detach(), name)


def plan_for(scenario: str) -> list[tuple[str, Callable[[Ctx], None]]]:
    assert scenario == "mesh", scenario
    return [
        ("placements", Ctx.placements),
        ("tensor_parallel", Ctx.tensor_parallel),
        ("mesh_2d_groups", Ctx.mesh_2d_groups),
        ("fsdp_over_tp", Ctx.fsdp_over_tp),
        ("checkpoint", Ctx.checkpoint),
        ("checkpoint_on_one_rank", Ctx.checkpoint_on_one_rank),  # last: it ends the 4-rank group
    ]


def check_names(scenario: str) -> list[str]:
    return [name for name, _ in plan_for(scenario)]


def main() -> None:
    scenario, rank, world, store_file, out_dir = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        Path(sys.argv[5]),
    )
    out = out_dir / f"rank{rank}.json"
    results: dict[str, dict[str, object]] = {"__pid__": {"ok": True, "detail": str(os.getpid())}}
    ctx = Ctx(rank, world, out_dir)
    torch.ember.set_device(ctx.device)
    init = f"file://{store_file}"
    # device_id binds the group: DeviceMesh then splits its dimensions' groups from it.
    dist.init_process_group(
        "cpu:gloo,ember:eccl", init_method=init, rank=rank, world_size=world, device_id=ctx.device
    )
    for name, fn in plan_for(scenario):
        start = time.monotonic()
        try:
            fn(ctx)
            results[name] = {"ok": True, "detail": ""}
        except Exception:
            results[name] = {"ok": False, "detail": traceback.format_exc()[-3000:]}
        results[name]["seconds"] = round(time.monotonic() - start, 3)
        out.write_text(json.dumps(results))
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
