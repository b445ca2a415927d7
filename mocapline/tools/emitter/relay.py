"""`mocapline relay`: forward UDP datagrams and drop a random share of them, to try a setup against
packet loss on one path.

The kernel's way is ``tc qdisc add dev <veth> root netem loss 5%`` on a veth pair between two
network namespaces; where the kernel has no ``sch_netem`` module (some containers and VMs), this
relay stands in for it: Axis Studio (or ``mocapline emit``) sends to the relay's port, the relay
sends on what survives. Drops are independent per datagram (Bernoulli, like netem's plain ``loss``)
and repeatable with ``--seed``. ``--delay-ms`` holds every datagram that long before forwarding it
(netem's ``delay``, in order): one path lagging the other, as when Axis Studio's main destination
goes through a slower network than the side path.
"""

from __future__ import annotations

import random
import socket
import sys
import threading
import time
from collections import deque

from mocapline.core.options import EnvArgumentParser, port_number


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", port_number(port)


class LossyRelay(threading.Thread):
    """Receives on ``listen``, forwards to ``dest``, drops each datagram with probability ``loss``."""

    def __init__(self, listen: tuple[str, int], dest: tuple[str, int], loss: float, seed: int | None = None,
                 delay_s: float = 0.0) -> None:
        super().__init__(name="lossy-relay", daemon=True)
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss {loss}: must be in [0, 1)")
        self.dest = dest
        self.loss = loss
        self.delay_s = delay_s
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind(listen)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.forwarded = 0
        self.dropped = 0
        self._halt = threading.Event()

    def run(self) -> None:
        out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        held: deque[tuple[float, bytes]] = deque()  # (due, datagram), in arrival order
        try:
            while not self._halt.is_set():
                while held and held[0][0] <= time.monotonic():
                    out.sendto(held.popleft()[1], self.dest)
                    self.forwarded += 1
                if held:
                    self.sock.settimeout(max(0.0005, min(0.1, held[0][0] - time.monotonic())))
                try:
                    data, _ = self.sock.recvfrom(65535)
                except TimeoutError:
                    continue
                finally:
                    self.sock.settimeout(0.1)
                if self.rng.random() < self.loss:
                    self.dropped += 1
                    continue
                held.append((time.monotonic() + self.delay_s, data))
            for _, data in held:  # stopping: what is held still goes out
                out.sendto(data, self.dest)
                self.forwarded += 1
        finally:
            out.close()
            self.sock.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline relay", description=__doc__)
    p.add_argument("--listen", type=parse_address, required=True, help="host:port to receive on")
    p.add_argument("--to", type=parse_address, required=True, help="host:port to forward to")
    p.add_argument("--loss", type=float, default=0.05, help="share of datagrams dropped (0.05 = 5%%)")
    p.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable pattern of drops")
    p.add_argument("--delay-ms", type=float, default=0.0, help="hold every datagram this long before forwarding it")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds; 0 = until Ctrl-C")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        relay = LossyRelay(args.listen, args.to, args.loss, args.seed, delay_s=args.delay_ms / 1000)
    except (ValueError, OSError) as exc:
        print(f"mocapline relay: {exc}", file=sys.stderr)
        return 2
    relay.start()
    deadline = time.monotonic() + args.duration if args.duration > 0 else float("inf")
    try:
        while relay.is_alive() and time.monotonic() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    relay.stop()
    print(f"mocapline relay: forwarded {relay.forwarded}, dropped {relay.dropped}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
