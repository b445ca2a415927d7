"""`mocapline keys DIR`: CURVE keys for the streamer's output link (ZeroMQ encryption + auth).

Writes, with ``zmq.auth.create_certificates``:

  DIR/server.key              the streamer's public certificate: copy it to every client host
  DIR/server.key_secret       the streamer's secret   -> streamer --curve-server-key DIR/server.key_secret
  DIR/clients/NAME.key        a client's public cert  -> streamer --curve-clients DIR/clients
  DIR/NAME.key_secret         a client's secret       -> viewer --curve-client-key DIR/NAME.key_secret
  DIR/NAME.key                (the same client's public certificate)

and the viewer (or robot) also gets ``--curve-server-public DIR/server.key``. Secret files are
made readable by their owner only. Run it again with new ``--client`` names to admit more clients
(the server keypair is kept); existing files are never overwritten unless ``--force``. Restart the
streamer after adding a client: it reads DIR/clients at start. To revoke a client, delete its
DIR/clients/NAME.key and restart the streamer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mocapline.core.options import EnvArgumentParser

SERVER = "server"
CLIENTS_DIR = "clients"


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline keys", description=__doc__)
    p.add_argument("dir", type=Path, help="directory for the certificates (created if needed)")
    p.add_argument("--client", nargs="+", default=["viewer"],
                   help="client names, one keypair each (e.g. viewer robot1)")
    p.add_argument("--force", action="store_true", help="replace existing certificates of the same names")
    return p


def _create(directory: Path, name: str) -> tuple[Path, Path]:
    import zmq.auth

    old = os.umask(0o077)  # the secret is never readable by others, not even for a moment
    try:
        public, secret = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(public, 0o644)
    os.chmod(secret, 0o600)
    return Path(public), Path(secret)


def generate(directory: Path, clients: list[str], *, force: bool = False) -> dict[str, Path]:
    """Create the server keypair (unless present) and one keypair per client; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    authorized = directory / CLIENTS_DIR
    authorized.mkdir(exist_ok=True)
    for name in clients:
        if not name or name == SERVER or "/" in name or name.startswith("."):
            raise ValueError(f"bad client name {name!r}")
        if not force and ((directory / f"{name}.key_secret").exists() or (authorized / f"{name}.key").exists()):
            raise FileExistsError(f"client {name!r} already has keys in {directory} (--force replaces them)")
    out: dict[str, Path] = {}
    server_secret = directory / f"{SERVER}.key_secret"
    if force or not server_secret.exists():
        _create(directory, SERVER)
    out["server_public"] = directory / f"{SERVER}.key"
    out["server_secret"] = server_secret
    out["clients_dir"] = authorized
    for name in clients:
        public, secret = _create(directory, name)
        (authorized / public.name).write_bytes(public.read_bytes())
        out[f"{name}_secret"] = secret
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        paths = generate(args.dir, args.client, force=args.force)
    except (ValueError, FileExistsError) as exc:
        print(f"mocapline keys: {exc}", file=sys.stderr)
        return 1
    d = args.dir
    print(f"streamer: --curve-server-key {paths['server_secret']} --curve-clients {paths['clients_dir']}")
    for name in args.client:
        print(f"{name}: --curve-client-key {d / (name + '.key_secret')} --curve-server-public {paths['server_public']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
