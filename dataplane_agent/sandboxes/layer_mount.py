"""Where a sandbox sees its environment's layer, and the variables that let its programs find it."""

from __future__ import annotations

# The layer's mount point inside every sandbox of an environment with one (read-only).
INNER_LAYER = "/opt/astrabox/env"
_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib", "lib/x86_64-linux-gnu")


def layer_env(base_path: str, layer: str = INNER_LAYER) -> dict[str, str]:
    """The variables that make a layer mounted at `layer` usable: PATH (before `base_path`),
    PYTHONPATH, NODE_PATH, LD_LIBRARY_PATH."""
    bins = [f"{layer}/usr/local/bin", f"{layer}/usr/bin", f"{layer}/bin", f"{layer}/python/bin",
            f"{layer}/node/node_modules/.bin"]  # fmt: skip
    return {
        "PATH": ":".join([*bins, base_path]),
        "PYTHONPATH": f"{layer}/python",
        "NODE_PATH": f"{layer}/node/node_modules",
        "LD_LIBRARY_PATH": ":".join(f"{layer}/{lib}" for lib in _LIB_DIRS),
    }
