"""The build environment: what every compiled product of the book is keyed by, computed once per process.

A chapter build's library, each translation unit's object, the stable library and the trace
probe are content-addressed in the build cache. Their keys all start from the same facts: the
toolchain (compilers, flags, which PyTorch: `book.builds.toolchain.toolchain_key`), the prelude header
the units are compiled against, and the driver library they link (built once per machine).
`current()` gathers them once; the modules that key a product (`book.builds.units`, `book.builds.builder`,
`book.builds.stable`, `book.display.widgets.probe`) ask it for their key (`digest`) instead of each hashing
the toolchain themselves. The stable library is a product of this environment too
(`book.builds.stable`, keyed by `digest`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from book.builds import toolchain


@dataclass(frozen=True)
class Environment:
    toolchain_key: str  # changes whenever a product made by another toolchain is stale
    prelude: str  # the text of book/builds/cpp/prelude.h, which every unit includes (precompiled)
    driver: Path  # libember_driver.so, which every build links

    def digest(self, *chunks: str | bytes) -> str:
        """A content address for a product of this environment made from `chunks`."""
        return toolchain._digest(self.toolchain_key, *chunks)

    def unit_key(self, text: str) -> str:
        """The key of a translation unit's object (`book.builds.units`): the prelude and driver it compiles
        against, and its own text."""
        return self.digest(self.prelude, str(self.driver), text)

    def build_key(self, ldflags: list[str], texts: list[str]) -> str:
        """The key of a chapter build's library (`book.builds.builder`): what it compiles and links."""
        return self.digest(self.prelude, str(self.driver), *ldflags, *texts)


@cache
def current() -> Environment:
    """This process's environment (builds the driver library the first time, once per machine)."""
    return Environment(toolchain.toolchain_key(), toolchain.prelude_text(), toolchain.driver_library())
