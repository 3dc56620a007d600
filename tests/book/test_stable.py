"""book.builds.stable: the library that registers ember's PrivateUse1 hooks once per process.

Hooks, slots and registrations are process-global and cannot be undone, so
every scenario runs in a fresh child process and reports what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

from book.builds import stable
from book.paths import REPO

NO_GENERATOR = (
    "ember: cannot create a random number generator: "
    "no random number generator is registered (chapter 10 adds one)"
)

# A chapter build's part that plugs two slots, as chapter 10 (generator) and
# chapter 12 (backend metadata) will.
PLUG_SOURCE = """\
#include "runtime/EmberHooks.h"

namespace {
// Stands in for chapter 10's generator: says which device it was asked for.
at::Generator testNewGenerator(c10::DeviceIndex device) {
  TORCH_CHECK(false, "test plug: a generator for device ", static_cast<int>(device));
}

void testSerialize(const at::Tensor&, std::unordered_map<std::string, bool>& metadata) {
  metadata["test_plug"] = true;
}

void testDeserialize(const at::Tensor&, std::unordered_map<std::string, bool>&) {}

ember::PlugNewGenerator plug_new_generator(&testNewGenerator);
ember::PlugBackendMeta plug_backend_meta(&testSerialize, &testDeserialize);
} // namespace
"""

# Shared by the children: the first line of what creating a generator raises.
CHILD_HELPERS = """\
import json
import torch

def generator_error(device):
    try:
        torch.Generator(device=device)
    except RuntimeError as error:
        return str(error).splitlines()[0]
    return None

def metadata():
    x = torch.empty(1, device="privateuseone")
    return torch._C._get_tensor_metadata(x)
"""


# The child leaves with os._exit, as book.run_isolated's does: after a backward on a
# PrivateUse1 device, PyTorch 2.13's interpreter shutdown can abort (an autograd device
# thread releases a Python object; torch_ember/autograd_threads.py has the story and the
# package's fix, which these chapter builds do not load).
CHILD_EXIT = """
import os, sys
sys.stdout.flush()
os._exit(0)
"""


def run_child(code: str) -> dict[str, Any]:
    env = dict(os.environ, EMBER_BOOK_BATCH="1")
    program = CHILD_HELPERS + textwrap.dedent(code) + CHILD_EXIT
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_stable_library_registers_the_hooks_once():
    seen = run_child(
        """
        from book.builds import stable
        from book.run.chapter import Chapter

        before = generator_error("privateuseone")
        first, second = stable.library(), stable.library()
        after = generator_error("privateuseone")
        build = Chapter.of("allocator").build()
        maps = {line.split()[-1] for line in open("/proc/self/maps") if "libember_stable" in line}
        print(json.dumps(dict(before=before, after=after, first=str(first), second=str(second),
                              maps=sorted(maps), build=str(build.library))))
        """
    )
    # Without the stable library PyTorch has no hooks for PrivateUse1 at all.
    assert "Please register PrivateUse1HooksInterface" in seen["before"]
    assert seen["after"] == NO_GENERATOR
    assert seen["first"] == seen["second"]
    # One copy in the process, also after a chapter build (which links against it) loaded.
    assert seen["maps"] == [seen["first"]]
    needed = subprocess.run(["readelf", "-d", seen["build"]], capture_output=True, text=True, check=True)
    assert "[libember_stable.so]" in needed.stdout


def test_the_stable_library_is_built_once_per_machine():
    path = stable.library()
    built = path.stat().st_mtime_ns
    seen = run_child(
        """
        from book.builds import stable
        print(json.dumps(dict(path=str(stable.library()))))
        """
    )
    assert seen["path"] == str(path)
    assert path.stat().st_mtime_ns == built  # the child found it in the cache


def test_backward_works_after_chapter_03():
    seen = run_child(
        """
        from book.run.chapter import Chapter

        # The autograd engine asks the accelerator for its current stream, and
        # PrivateUse1 counts as the accelerator only once it has been named.
        torch.utils.rename_privateuse1_backend("privateuseone")
        Chapter.of("fallback").build()
        x_cpu = torch.tensor([0.5, -1.0, 2.0, 3.5], requires_grad=True)
        w_cpu = torch.tensor([2.0, 0.25, -1.5, 1.0])
        ((x_cpu * w_cpu).sum() + (x_cpu * x_cpu).sum()).backward()
        x = x_cpu.detach().to("privateuseone").requires_grad_()
        w = w_cpu.to("privateuseone")
        ((x * w).sum() + (x * x).sum()).backward()
        print(json.dumps(dict(grad=x.grad.cpu().tolist(), expected=x_cpu.grad.tolist(),
                              device=str(x.grad.device))))
        """
    )
    assert seen["device"] == "privateuseone:0"
    assert seen["grad"] == seen["expected"]


def test_retiring_a_build_unplugs_its_slots_and_a_rebuild_plugs_them_again():
    seen = run_child(
        f"""
        from book.builds import builder
        from book.parts.cells import CppPart
        from book.run.chapter import Chapter

        chapter = Chapter.of("fallback")
        base = chapter.parts_through()
        plug = CppPart(chapter.slug, "test_plug", {PLUG_SOURCE!r})
        seen = {{}}
        chapter.build()
        seen["chapter 03"] = [generator_error("privateuseone"), metadata()]
        builder.build(parts=base + [plug], chapter=chapter.slug)
        seen["plugged"] = [generator_error("privateuseone:1"), generator_error("privateuseone"), metadata()]
        builder.unload()
        seen["retired"] = [generator_error("privateuseone")]
        builder.build(parts=base + [plug], chapter=chapter.slug)  # the retired build, loaded again
        seen["rebuilt"] = [generator_error("privateuseone"), metadata()]
        builder.build(parts=base, chapter=chapter.slug)
        seen["without the plug"] = [generator_error("privateuseone"), metadata()]
        print(json.dumps(seen))
        """
    )
    assert seen["chapter 03"] == [NO_GENERATOR, {}]
    # The hooks resolve the device (-1 is the current one) before they call the slot.
    assert seen["plugged"] == [
        "test plug: a generator for device 1",
        "test plug: a generator for device 0",
        {"test_plug": True},
    ]
    assert seen["retired"] == [NO_GENERATOR]
    assert seen["rebuilt"] == ["test plug: a generator for device 0", {"test_plug": True}]
    assert seen["without the plug"] == [NO_GENERATOR, {}]
