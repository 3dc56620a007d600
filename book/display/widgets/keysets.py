"""Dispatch key sets, computed with PyTorch's own ``DispatchKeySet`` (``torch._C``).

A ``DispatchKeySet`` is 64 bits (c10/core/DispatchKeySet.h): the low
``num_backends`` bits are *backend* bits (CPU, CUDA, ..., PrivateUse1, Meta),
the rest are *functionality* bits (Dense, Sparse, BackendSelect,
ADInplaceOrView, AutogradFunctionality, ...). A runtime key such as
``AutogradPrivateUse1`` is a per-backend functionality bit together with a
backend bit, so ``{AutogradCPU, PrivateUse1}`` is the same set as
``{CPU, PrivateUse1, AutogradCPU, AutogradPrivateUse1}``, and the key the
dispatcher picks from it is ``AutogradPrivateUse1``: the highest functionality
with the highest backend (``highestPriorityTypeId``). Removing a key removes
only its functionality bit.

Everything here uses torch's binding of that C++ class (bit operations,
``highestPriorityTypeId``, the ``after_*`` constants), so the set algebra is
the dispatcher's own; this module only names things and walks the bits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cache

import torch

KeySet = torch._C.DispatchKeySet
DispatchKey = torch._C.DispatchKey

# The low bits of a DispatchKeySet are backend bits; everything above is a functionality.
BACKEND_BITS = (1 << torch._C._dispatch_num_backends()) - 1
FULL = torch._C._dispatch_keyset_full()
EMPTY = KeySet.from_raw_repr(0)
# c10::after_autograd_keyset: what an autograd kernel redispatches to (every key below AutogradOther,
# the lowest autograd key). c10::after_ADInplaceOrView_keyset: likewise below ADInplaceOrView.
AFTER_AUTOGRAD = torch._C._after_autograd_keyset
AFTER_AD_INPLACE_OR_VIEW = torch._C._after_ADInplaceOrView_keyset

_KEY_LIST = re.compile(r"^DispatchKeySet\((?P<keys>.*)\)$")


def key(name: str) -> DispatchKey:
    """The DispatchKey called `name` ("AutogradCPU")."""
    try:
        return DispatchKey.__members__[name]
    except KeyError:
        raise ValueError(f"{name!r} is not a dispatch key") from None


def of(names: Iterable[str]) -> KeySet:
    """The key set holding the runtime keys `names`."""
    found = EMPTY
    for name in names:
        found = found | KeySet(key(name))
    return found


def from_raw(bits: int) -> KeySet:
    return KeySet.from_raw_repr(bits)


def names(keys: KeySet) -> list[str]:
    """The runtime keys in `keys`, highest priority first (what the dispatcher would try in turn).

    Like c10's iterator (and its printing), this lists a per-backend
    functionality once per backend bit; a functionality bit with no backend bit
    names no runtime key and is not listed.
    """
    match = _KEY_LIST.match(str(keys))
    if match is None:  # pragma: no cover - torch changed its printing
        raise RuntimeError(f"cannot read the key set {keys}")
    listed = [name.strip() for name in match["keys"].split(",") if name.strip()]
    return listed[::-1]


def highest(keys: KeySet) -> str:
    """The key the dispatcher looks up for `keys` ("Undefined" for an empty set)."""
    return keys.highestPriorityTypeId().name


@cache
def _ranks() -> dict[str, int]:
    return {name: rank for rank, name in enumerate(reversed(names(FULL)))}


def rank(name: str) -> int:
    """Priority of a runtime key: higher wins. Undefined (no key) ranks below all."""
    return _ranks().get(name, -1)


def functionality(keys: KeySet) -> int:
    """The functionality bits of `keys`."""
    return keys.raw_repr() & ~BACKEND_BITS


def backends(keys: KeySet) -> int:
    """The backend bits of `keys`."""
    return keys.raw_repr() & BACKEND_BITS


def full_after(name: str) -> KeySet:
    """c10::DispatchKeySet(FULL_AFTER, key): every functionality below `name`'s, all backends."""
    return torch._C._dispatch_keyset_full_after(key(name))


_AUTOGRAD = functionality(of(["AutogradOther", "AutogradNestedTensor", "AutogradCPU"]))


def is_autograd(name: str) -> bool:
    """One of the keys in c10::autograd_dispatch_keyset (AutogradOther, AutogradX, AutogradNestedTensor)."""
    return name != "Undefined" and functionality(of([name])) & _AUTOGRAD != 0


def fallthrough_mask(candidates: KeySet, is_fallthrough: Callable[[str], bool]) -> KeySet:
    """The non-fallthrough mask DispatchKeyExtractor applies to `candidates`.

    c10::DispatchKeyExtractor keeps, per operator, the keys whose computed
    table entry is not a fallthrough (``nonFallthroughKeys_``), and per
    backend for per-backend functionalities (``nonFallthroughKeysPerBackend_``,
    indexed by the highest backend of the call's key set). A fallthrough at
    ``AutogradPrivateUse1`` therefore drops the whole Autograd functionality
    bit for a call whose highest backend is PrivateUse1, and nothing for a
    CPU-only call. `is_fallthrough(runtime key)` reads the computed table.
    """
    backend_bits = backends(candidates)
    mask = FULL
    for name in names(candidates):
        # The runtime key the extractor consults for this functionality: itself for a
        # functionality without backends, else that functionality at the call's highest backend.
        consulted = highest(from_raw(functionality(of([name])) | backend_bits))
        if is_fallthrough(consulted):
            mask = mask.remove(key(name))
    return mask


def masked_between(present: KeySet, kept: KeySet, below: str | None, above: str) -> list[str]:
    """Keys of `present` masked out of `kept`, ranked above `above` and below `below`, highest first.

    One runtime key per masked functionality: the one the dispatcher would
    have picked (that functionality at the highest backend).
    """
    remaining = present - kept  # functionality bits only; the backend bits stay
    found: list[str] = []
    while True:
        top = highest(remaining)
        if top == "Undefined" or rank(top) <= rank(above):
            return found
        if below is None or rank(top) < rank(below):
            found.append(top)
        fewer = remaining.remove(key(top))
        if fewer == remaining:  # pragma: no cover - cannot happen: top's functionality bit is set
            return found
        remaining = fewer
