"""Regenerates the checked-in protobuf and gRPC code from proto/, and `astrabox/descriptors.binpb`:
the protos (with what they import) as a FileDescriptorSet that keeps their comments, which the
control plane's server reflection serves so that `grpcurl describe` shows them.

Run from anywhere: ``python clients/python/generate.py``. The output is
deterministic, so a test can regenerate into a scratch directory and compare.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
THIRD_PARTY = ROOT / "third_party" / "googleapis"
DEFAULT_OUT = ROOT / "clients" / "python"
DESCRIPTOR_SET = Path("astrabox") / "descriptors.binpb"


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.rglob("*.proto"))


def generate(out_dir: Path) -> None:
    (out_dir / DESCRIPTOR_SET).parent.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{THIRD_PARTY}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--descriptor_set_out={out_dir / DESCRIPTOR_SET}",
        "--include_imports",
        "--include_source_info",
        *(str(p.relative_to(PROTO_DIR)) for p in proto_files()),
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    for package_dir in {(out_dir / p.relative_to(PROTO_DIR)).parent for p in proto_files()}:
        while package_dir != out_dir:
            (package_dir / "__init__.py").touch()
            package_dir = package_dir.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    generate(parser.parse_args().out)


if __name__ == "__main__":
    main()
