"""Looking inside torch.save checkpoints, for the tests of chapter 12 and of the package's serialization.

A checkpoint is a zip archive whose `*/data.pkl` member holds the pickle, including each storage's location
tag (e.g. "ember:0") and backend-metadata flags. tests/chapters and tests/package both import this module
(pytest puts tests/ on the path for tests/conftest.py).
"""

from __future__ import annotations

import io
import pickletools
import zipfile

import torch


def saved(obj: object) -> bytes:
    """`obj` as torch.save writes it."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def loaded(data: bytes, **options: object) -> object:
    """torch.load of a checkpoint held in memory."""
    return torch.load(io.BytesIO(data), **options)


def pickle_strings(data: bytes) -> list[str]:
    """Every string in the checkpoint's pickle (location tags, flag names, ...)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("/data.pkl")))
    return [arg for _, arg, _ in pickletools.genops(pickled) if isinstance(arg, str)]


def retagged(data: bytes, old: str, new: str) -> bytes:
    """The checkpoint with `old` replaced by `new` (same length: the pickle stores string lengths)."""
    assert len(old) == len(new), (old, new)
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            content = source.read(info)
            if info.filename.endswith("/data.pkl"):
                content = content.replace(old.encode(), new.encode())
            target.writestr(info, content)
    return out.getvalue()
