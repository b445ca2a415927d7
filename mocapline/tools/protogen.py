"""Regenerate the protobuf bindings: `python -m mocapline.tools.protogen [--check]`.

The generated module is committed so that a plain `pip install` needs no compiler; tests call
`generate()` into a temporary folder and compare, so a stale binding fails CI.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "mocapline" / "core" / "pb"
PROTO_FILE = "mocap.proto"


def generate(out_dir: Path) -> Path:
    """Run protoc (from the pinned grpcio-tools) on proto/mocap.proto into out_dir."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(
        ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", PROTO_FILE]
    )
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")
    return out_dir / "mocap_pb2.py"


def is_stale() -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        return any(
            (fresh / name).read_bytes() != (OUT_DIR / name).read_bytes()
            for name in ("mocap_pb2.py", "mocap_pb2.pyi")
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed code is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = is_stale()
        print("stale" if stale else "up to date")
        return 1 if stale else 0
    print(generate(OUT_DIR))
    return 0


if __name__ == "__main__":
    sys.exit(main())
