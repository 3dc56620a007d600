"""Random number generators (the generator chapter): `torch.cuda.random`'s names.

Each function works on a device's default generator, which the backend hands out
through the operator `ember::default_generator`.
"""

from __future__ import annotations

import torch

from .devices import DeviceLike, _device_index, device_count

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]

# ember-book: begin default_generator
_DEFAULT_GENERATOR_OP = "ember::default_generator"


def _has_generators() -> bool:
    """Whether the loaded backend has ember's generators (the book's chapters before 08
    do not)."""
    return torch._C._dispatch_has_kernel(_DEFAULT_GENERATOR_OP)


def default_generator(device: DeviceLike = None) -> torch.Generator:
    """The default generator of `device`: what random operators use without a
    `generator=` argument.

    The backend hands it out through the operator `ember::default_generator`, looked up
    on every call: a rebuilt backend (in the book) has generators of its own.
    """
    index = _device_index(device)
    if not _has_generators():
        missing = "the loaded backend has no random number generator"
        raise RuntimeError(f"ember: {missing} (chapter 10 adds one)")
    operator, _ = torch._C._jit_get_operation(_DEFAULT_GENERATOR_OP)
    return operator(index)


# ember-book: end default_generator


def manual_seed(seed: int) -> None:
    """Seed the current ember device's default generator."""
    default_generator().manual_seed(int(seed))


# ember-book: begin manual_seed_all
def manual_seed_all(seed: int) -> None:
    """Seed every ember device's default generator. torch.manual_seed calls this; with a
    backend that has no generator yet (the book before chapter 10) there is nothing to
    seed."""
    if _has_generators():
        for index in range(device_count()):
            default_generator(index).manual_seed(int(seed))


# ember-book: end manual_seed_all


def seed() -> None:
    """Seed the current ember device's default generator with a nondeterministic number."""
    default_generator().seed()


def seed_all() -> None:
    """Seed every ember device's default generator with one nondeterministic number."""
    chosen = default_generator(0).seed()
    manual_seed_all(chosen)


def initial_seed() -> int:
    """The seed of the current ember device's default generator."""
    return default_generator().initial_seed()


def get_rng_state(device: DeviceLike = None) -> torch.Tensor:
    """The state of `device`'s default generator: a CPU uint8 tensor (seed and offset, 16 bytes)."""
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = None) -> None:
    """Restore the state of `device`'s default generator from `get_rng_state`'s tensor."""
    default_generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """The states of every ember device's default generator, by device index."""
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Restore every ember device's default generator from `get_rng_state_all`'s list."""
    if len(new_states) != device_count():
        raise ValueError(
            f"ember: expected {device_count()} generator states, one per device, got {len(new_states)}"
        )
    for index, state in enumerate(new_states):
        set_rng_state(state, index)
