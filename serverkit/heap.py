"""What a server process does with Python's heap once it has started.

Python's cyclic collector scans every tracked object on each full (oldest-generation)
collection. A started control plane holds some 65,000 of them (its modules, gRPC, asyncpg,
protobuf descriptors) that live as long as the process, and a full collection comes every few
tens of thousands of objects its streams allocate (a watch catching up makes several per event):
each one stalled every stream of the process for ~40 ms here (~150 ms in a process that also
runs an agent). Frozen, those objects are left out of every later collection; what the process
makes afterwards is collected as before.
"""

from __future__ import annotations

import gc


def freeze_startup() -> None:
    """Collect what starting left behind, then move everything still alive into the permanent
    generation (`gc.freeze`): long-lived objects nobody frees, which later collections skip. Call
    once the server serves; objects frozen and dropped later are still freed by their reference
    count (only a cycle among them stays)."""
    gc.collect()
    gc.freeze()
