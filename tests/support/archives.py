"""Unpacking a downloaded workspace archive in a test."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def unpack(archive: bytes, out: Path) -> None:
    """Unpack a download (a tar the sandbox made) into `out`, with tarfile's "data" filter where
    this interpreter has one (3.11.4 and newer; Debian 12's python3 is 3.11.2)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as extracted:
        extracted.extractall(out, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
