"""The tensor methods that synchronise the host with the device on an accelerator, counted while code runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SYNC_METHODS = ("item", "cpu", "tolist", "__bool__", "__float__", "__int__")


@contextmanager
def counting_syncs() -> Iterator[dict[str, int]]:
    """Count calls of the tensor methods that synchronise with the device on an accelerator."""
    import torch

    counts = dict.fromkeys(SYNC_METHODS, 0)
    originals = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}

    def counting(name: str) -> Callable[..., Any]:
        original = originals[name]

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(self, *args, **kwargs)

        return method

    for name in SYNC_METHODS:
        setattr(torch.Tensor, name, counting(name))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
