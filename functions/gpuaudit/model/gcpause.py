"""The cyclic garbage collector paused while the judge builds a result and while the result is written as JSON.

Both make hundreds of thousands of objects that all stay alive until the step ends (the result's rows, the JSON
document): each full collection the allocations trigger walks every live object, the loaded evidence too, and frees
nothing (a 10,000-node judge ran six, ~0.7 s of its 3.7 s; the JSON ~0.5 s of its 1.9 s). Reference counting still
frees what has no cycle; a cycle made meanwhile waits for the next collection after the step (the choice
embedded/world.py makes loading a world)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
