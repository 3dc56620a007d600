"""torch_ember: the ember backend for PyTorch.

`import torch_ember` loads the compiled backend (`torch_ember._C`: allocator,
device guard and kernels register themselves when it loads), names the
PrivateUse1 device "ember", registers the device module (the package
`device_module/`) as `torch.ember` and adds `Tensor.ember()`, `Tensor.is_ember`, `Module.ember()` and the
storage methods. After that, `torch.ones(2, device="ember")` works.

Installed, the package also loads itself on `import torch`: it declares a
`torch.backends` entry point (`_autoload`, see pyproject.toml), and torch calls
every such entry point while it is imported, unless the environment sets
`TORCH_DEVICE_BACKEND_AUTOLOAD=0`. The book's processes set it (book/autoload.py):
they build their own backend, and a process holds only one.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

# The package's one version number: pyproject.toml reads it from here (a literal, so setuptools
# reads it without importing the package).
__version__ = "0.1.0"


def _autoload() -> None:
    """The `torch.backends` entry point: `import torch` calls it (unless TORCH_DEVICE_BACKEND_AUTOLOAD=0).

    Loading the entry point imports this package, which did all the work above;
    the call itself has nothing left to do. torch reports an exception raised here
    as "Failed to load the backend extension: ember" and `import torch` fails.
    """


# _autoload is defined before `import torch`: when `import torch_ember` comes first, importing torch runs
# the entry point against this module while it is still initializing, and it must already be there.
import torch  # noqa: E402

BACKEND_NAME = "ember"

__all__ = ["BACKEND_NAME", "device_module"]


def _check_privateuse1_is_free() -> None:
    """Refuse to load next to another PrivateUse1 backend.

    The dispatcher lets a second library override PrivateUse1 kernels with a mere
    warning, so two backends in one process would mix silently.
    """
    if "torch_ember._C" in sys.modules:
        return  # ours, loaded by an earlier import
    name = torch._C._get_privateuse1_backend_name()
    taken = (
        name not in ("privateuseone", BACKEND_NAME)
        or torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", "PrivateUse1")
        or torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.PrivateUse1)
    )
    if taken:
        raise ImportError(
            f"torch_ember: another PrivateUse1 backend (device name {name!r}) is already loaded in this "
            "process, for example a chapter build of the book. A process holds only one: import "
            "torch_ember in a fresh process."
        )


_check_privateuse1_is_free()

# Loading _C loads the backend's library (libtorch_ember.so, beside it), which registers the
# allocator, the device guard and the kernels; _C is its Python bindings.
from torch_ember import _C, device_module  # noqa: E402
from torch_ember.driver import Driver  # noqa: E402

# The backend without Python: what a C++ program loads (extension/runner/). Made global, as such a
# program loads it: AOTInductor's generated code calls ember's C shim (aoti_torch_ember_*) in it.
LIBRARY = Path(_C.__file__).with_name("libtorch_ember.so")
ctypes.CDLL(str(LIBRARY), mode=os.RTLD_GLOBAL)

# The driver's C API is compiled into the library, the bindings' C entry points into _C: the device
# module looks both up through _C (a symbol lookup in _C searches the libraries it links too).
device_module.attach(Driver(_C.__file__))


def _register() -> None:
    # _C registered the name "ember" in c10 when it loaded (csrc/runtime/EmberName.cpp), before
    # anything could ask for a type string ("torch.ember.FloatTensor" is fixed at the first
    # one). Python's rename registers the same c10 name again, which c10 allows, and does
    # torch.utils' own bookkeeping (its copy of the name, the profiler's and autograd's
    # DeviceType names). Each step is done once: importing (or reloading) again is harmless.
    if torch.utils.backend_registration._privateuse1_backend_name != BACKEND_NAME:
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    if not hasattr(torch, BACKEND_NAME):
        torch._register_device_module(BACKEND_NAME, device_module)
    if not hasattr(torch.Tensor, f"is_{BACKEND_NAME}"):
        # Storages too (off by default). Ember's memory holds bytes of any dtype, so no
        # `unsupported_dtype` list: TypedStorage.ember() refuses nothing.
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


_register()

# After the renaming, so that what they register is registered for the "ember" device type:
# - custom_ops: the Python custom operators (ember::soft_shrink, ember::soft_shrink_);
# - compiler: torch.compile and torch.export on ember (Dynamo's device interface, Inductor's
#   ember backend), whose generated kernels launch through emberLaunchCompiled in LIBRARY.
# - autograd_threads: a backward on ember, then exit, must not abort at interpreter shutdown.
from torch_ember import autograd_threads, compiler, custom_ops  # noqa: E402,F401
from torch_ember.compiler import deferred  # noqa: E402

autograd_threads.register(BACKEND_NAME, device_module.device_count())

compiler.use_launcher(LIBRARY)
# Dynamo's part as soon as Dynamo is imported: torch.compile(backend="eager") traces ember's
# streams too, and never imports Inductor.
deferred.run_after_import(lambda: compiler.device_interface.register(device_module), ["torch._dynamo"])


def _register_compiler() -> None:
    compiler.register(device_module, LIBRARY)
    # cpp_wrapper=True and AOTInductor: ember's C++ wrapper with its C shim (compiler/aoti.py).
    compiler.aoti.register()


deferred.run_after_import(_register_compiler)

# Forward-mode AD through the fused recurrent cells: registered when PyTorch registers its own forward-AD
# decompositions (the first make_dual imports the module below).
from torch_ember import forward_ad  # noqa: E402

deferred.run_after_import(forward_ad.register, ["torch._decomp.decompositions_for_jvp"])

# torch.distributed: eccl, the collective backend for ember devices (csrc/distributed). Registered
# now, so that `import torch_ember` alone is enough for init_process_group, DDP and FSDP2.
from torch_ember import distributed  # noqa: E402

distributed.register(device_module.backend.entry)
