"""A plugin with manners: installing torch_ember changes nothing for other devices (issue 26).

The package loads itself on `import torch` (autoload), so whatever it changes globally, every user of
the environment gets, CUDA's and the CPU's included. These tests compare a process without torch_ember
with one that has it (imported as autoload imports it, its compiler registered, graphs compiled on
ember, one with a side stream): Inductor's and Dynamo's configuration, the CPU's generated code, the
identity of every attribute of PyTorch's modules, and the kernels at the dispatch keys a CPU or CUDA call
passes through.

What ember registers for itself is expected: the device name, the device module `torch.ember`, Inductor's
and Dynamo's entries for the device type "ember", and the two kernels in EXPECTED_REGISTERED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Runs in a fresh process with autoload off; prints one JSON line. WITH_EMBER: import torch_ember after
# the first snapshot (what autoload would do inside `import torch`), else the process never sees it.
PROBE = textwrap.dedent(
    """
    import json, os, re, sys
    import torch
    import torch._dynamo, torch._inductor.compile_fx, torch._inductor.config, torch._inductor.scheduler
    from torch._inductor.utils import run_and_get_code

    def snapshot():
        # Every public and private attribute of PyTorch's modules, by identity.
        return {
            (name, attr): id(value)
            for name, module in list(sys.modules.items())
            if name.startswith("torch.") and module is not None
            for attr, value in list(vars(module).items())
        }

    def config_of(module):
        def portable(value):  # a set's repr follows the process's string hashing
            return repr(sorted(map(repr, value))) if isinstance(value, (set, frozenset)) else repr(value)
        return {key: portable(value) for key, value in sorted(module.save_config_portable().items())}

    def cpu_code():
        torch._dynamo.reset()
        def f(x, w):
            y = x.view(-1, 32)
            return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)).view(x.shape) * w + x.sin()
        x, w = torch.randn(16, 256), torch.randn(256)
        _, (code,) = run_and_get_code(torch.compile(f), x, w)
        return re.sub(r"AOT ID: \\['\\d+_", "AOT ID: ['N_", code)  # graphs compiled before count

    def dispatcher():
        # Which operators of other namespaces than ember's have a kernel at each key a CPU or CUDA
        # call can pass through.
        keys = ["CPU", "CUDA", "Meta", "BackendSelect", "Python", "Functionalize", "ADInplaceOrView",
                "Autograd", "AutogradCPU", "AutogradCUDA", "AutocastCPU", "AutocastCUDA",
                "CompositeImplicitAutograd", "CompositeExplicitAutograd", "Conjugate", "Negative",
                "FuncTorchBatched", "FuncTorchDynamicLayerFrontMode", "ZeroTensor", "QuantizedCPU"]
        return {f"{key}:{op}" for key in keys
                for op in torch._C._dispatch_get_registrations_for_dispatch_key(key)
                if not op.startswith("ember::")}

    before, dispatch_before = snapshot(), dispatcher()
    registered = set()
    if os.environ["WITH_EMBER"] == "1":
        import torch_ember  # what autoload does on `import torch`: here after the snapshot

        # What the import registered (compiling below makes PyTorch import more of itself).
        registered = dispatcher() - dispatch_before
        torch._dynamo.reset()
        x = torch.randn(8, 64, device="ember")
        torch.compile(lambda t: (t.view(-1, 32) / t.view(-1, 32).sum(-1, keepdim=True)).relu())(x)
        side = torch.ember.Stream()
        def on_side(t):
            main = torch.ember.current_stream()
            side.wait_stream(main)
            with torch.ember.stream(side):
                u = t.sin() * 2
            main.wait_stream(side)
            return u + 1
        torch.compile(on_side, fullgraph=True)(x)
    if os.environ["WITH_EMBER"] == "global":  # what torch_ember 0.1.0's register() did
        import torch_ember
        torch._inductor.config.loop_reindexing_after_fusion = False
        rule = torch._inductor.scheduler.device_need_guard
        torch._inductor.scheduler.device_need_guard = lambda device: device == "ember" or rule(device)
    code = cpu_code()
    after = snapshot()
    replaced = sorted(f"{name}.{attr}" for (name, attr), ident in before.items()
                      if (name, attr) in after and after[(name, attr)] != ident)
    print(json.dumps({
        "inductor_config": config_of(torch._inductor.config),
        "dynamo_config": config_of(torch._dynamo.config),
        "cpu_code": code,
        "replaced": replaced,
        "registered": sorted(registered),
        "need_guard": torch._inductor.scheduler.device_need_guard.__module__,
    }))
    """
)

# What ember's registration itself changes in PyTorch's modules: the device's name (c10 and
# torch.utils keep a copy), and module-level caches PyTorch fills on first use of any device.
EXPECTED_REPLACED = {"torch.utils.backend_registration._privateuse1_backend_name"}

# Kernels ember registers for other namespaces' operators at keys shared by every backend: copies to
# and from ember let a conjugate or negative view through to `_copy_from` (csrc/aten/EmberCopy.cpp),
# which ATen calls only when one side is a device its copy_ does not handle (ember, XLA, ...); a CPU
# or CUDA copy never reaches it.
EXPECTED_REGISTERED = {"Conjugate:aten::_copy_from", "Negative:aten::_copy_from"}


def probe(ember: str, tmp_cache: str) -> dict[str, object]:
    """ember: "0" (no torch_ember), "1" (torch_ember imported, graphs compiled on ember), "global"
    (torch_ember plus the process-wide changes its Inductor registration made before issue 26)."""
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the probe imports torch_ember itself, after its snapshot
    env["WITH_EMBER"] = ember
    # Every probe generates its code afresh (no FX graph or AOT autograd cache), but the probes share the
    # compiled kernels' cache: a kernel whose source is the same in two probes is compiled once.
    env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
    env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    env["TORCHINDUCTOR_CACHE_DIR"] = tmp_cache
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_torch_ember_changes_nothing_inductor_or_the_cpu_sees(tmp_path: Path) -> None:
    without = probe("0", str(tmp_path))
    with_ember = probe("1", str(tmp_path))
    assert with_ember["inductor_config"] == without["inductor_config"]
    assert with_ember["dynamo_config"] == without["dynamo_config"]
    assert with_ember["cpu_code"] == without["cpu_code"]
    assert with_ember["need_guard"] == without["need_guard"] == "torch._inductor.utils"
    assert set(with_ember["replaced"]) - set(without["replaced"]) <= EXPECTED_REPLACED
    assert set(with_ember["registered"]) == EXPECTED_REGISTERED and without["registered"] == []
    # The probe sees a process-wide change: the two ember made before are caught.
    changed = probe("global", str(tmp_path))
    assert changed["inductor_config"] != without["inductor_config"]
    assert changed["need_guard"] != "torch._inductor.utils"
    assert "torch._inductor.scheduler.device_need_guard" in changed["replaced"]
