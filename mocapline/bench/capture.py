"""``mocapline bench capture``: parse + FK frames/s on one core, next to a bare struct.unpack.

The take is synthetic but shaped like a real one: 59 bones, every angle a slow sinusoid with its
own frequency and phase (tens of degrees), the root walking. Each round times the whole take;
the best round is reported (least disturbed by the rest of the machine), the median alongside.
The floor is ``struct.unpack`` of the same datagrams (header and all floats): no validation, no
numpy, no FK. ``ratio`` = fps / floor_fps.

``fps`` is capture's own path (CaptureCore: validate, ledger, merge, FK with the hands, HumanFrame) draining a
backlog, which is when throughput matters: the service takes what the FIFO holds (up to 64
datagrams) and runs the FK of all of them as one batch. ``single_frame_fps`` is the same work one
datagram at a time, i.e. the per-frame cost when frames trickle in (1 / latency). ``parse_fk`` is
parse + FK of the 23 bodies alone, ``parse_fk_hands`` with the 40 hand bodies (``hands_ratio``, side
by side in the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, add_axis_options, encode_datagram, parse_datagram
from mocapline.formats.skeleton import get_skeleton
from mocapline.services.capture.core import AxisDecoder, CaptureCore
from mocapline.services.capture.fk import AxisForwardKinematics
from mocapline.services.capture.sources import BATCH_MAX


def synthetic_take(
    config: AxisBvhConfig, frames: int, fps: float = 60.0, seed: int = 0
) -> list[bytes]:
    skeleton = get_skeleton(config.skeleton)
    n = len(skeleton.bones)
    rng = np.random.default_rng(seed)
    amplitude = rng.uniform(5.0, 60.0, (n, 3))
    frequency = rng.uniform(0.2, 2.0, (n, 3))
    phase = rng.uniform(0.0, 2 * np.pi, (n, 3))
    t = np.arange(frames)[:, None, None] / fps
    channels = np.zeros((frames, n, 6))
    channels[:, :, :3] = skeleton.offsets_cm
    channels[:, :, 3:] = amplitude * np.sin(2 * np.pi * frequency * t + phase)
    channels[:, 0, 0] += 100.0 * np.sin(0.3 * t[:, 0, 0])
    channels[:, 0, 2] += 120.0 * t[:, 0, 0]
    channels[:, 0, 1] += 3.0 * np.sin(2 * np.pi * 1.8 * t[:, 0, 0])
    return [encode_datagram(1000 + i, channels[i], config=config) for i in range(frames)]


def _time_rounds(run: Callable[[], None], rounds: int) -> list[float]:
    run()  # warm-up
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return seconds


def _pin_to_one_core() -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def measure(
    frames: int, rounds: int, batch: int, config: AxisBvhConfig
) -> dict[str, float | int | None]:
    take = synthetic_take(config, frames)
    fk = AxisForwardKinematics(config.skeleton, config.rotation_order)
    floor_struct = struct.Struct(f"<H4sHBBI32sIIIIH{(len(take[0]) - 64) // 4}f")

    def floor() -> None:
        unpack = floor_struct.unpack
        for datagram in take:
            unpack(datagram)

    def parse_fk() -> None:
        bodies = fk.bodies
        for datagram in take:
            bodies(parse_datagram(datagram, config).channels)

    def parse_fk_batched() -> None:
        for start in range(0, len(take), batch):
            chunk = take[start : start + batch]
            fk.bodies_batch(np.stack([parse_datagram(d, config).channels for d in chunk]))

    def parse_fk_hands() -> None:
        bodies = fk.bodies_and_hands
        for datagram in take:
            bodies(parse_datagram(datagram, config).channels)

    def parse_only() -> None:
        for datagram in take:
            parse_datagram(datagram, config)

    dgrams = [Datagram(i, 7014, "127.0.0.1", d) for i, d in enumerate(take)]

    def service_backlog() -> None:
        core = CaptureCore(AxisDecoder(config), [7014])
        for start in range(0, len(dgrams), BATCH_MAX):
            frames_out = core.feed_batch(dgrams[start : start + BATCH_MAX], 0.0)
            assert len(frames_out) == len(dgrams[start : start + BATCH_MAX])

    def service_single() -> None:
        core = CaptureCore(AxisDecoder(config), [7014])
        for dgram in dgrams:
            core.feed(dgram, 0.0)

    positions, quaternions = fk.bodies(parse_datagram(take[-1], config).channels)
    assert np.isfinite(positions).all() and np.isfinite(quaternions).all()

    cpu = _pin_to_one_core()
    runs = {
        "floor": floor,
        "service": service_backlog,
        "single": service_single,
        "parse_fk": parse_fk,
        "parse_fk_hands": parse_fk_hands,
        "batch": parse_fk_batched,
        "parse": parse_only,
    }
    results = {name: _time_rounds(run, rounds) for name, run in runs.items()}
    best = {name: frames / min(s) for name, s in results.items()}
    median = {name: frames / statistics.median(s) for name, s in results.items()}
    return {
        "fps": best["service"],
        "floor_fps": best["floor"],
        "ratio": best["service"] / best["floor"],
        "single_frame_fps": best["single"],
        "parse_fk_fps": best["parse_fk"],
        "parse_fk_hands_fps": best["parse_fk_hands"],
        "hands_ratio": best["parse_fk_hands"] / best["parse_fk"],
        "fps_median": median["service"],
        "floor_fps_median": median["floor"],
        "batch_fps": best["batch"],
        "batch_size": batch,
        "parse_only_fps": best["parse"],
        "frames": frames,
        "rounds": rounds,
        "cpu": cpu,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mocapline bench capture", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--frames", type=int, default=3000, help="datagrams in the take")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds")
    parser.add_argument("--batch", type=int, default=32, help="frames per bodies_batch call")
    add_axis_options(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.frames < 1 or args.rounds < 1 or args.batch < 1:
        parser.error("--frames, --rounds and --batch must be positive")
    config = AxisBvhConfig(skeleton=args.skeleton, rotation_order=args.rotation_order)
    result = measure(args.frames, args.rounds, args.batch, config)
    if args.json:
        print(json.dumps(result))
    else:
        frames, rounds, cpu = result["frames"], result["rounds"], result["cpu"]
        print(f"take: {frames} datagrams, {rounds} rounds, core {cpu}")
        print(f"capture path   {result['fps']:>10.0f} frames/s, draining a backlog (median {result['fps_median']:.0f})")
        print(f"  one by one   {result['single_frame_fps']:>10.0f} frames/s")
        print(f"parse + FK     {result['parse_fk_fps']:>10.0f} frames/s, single frames, no ledger, the 23 bodies")
        print(f"  with hands   {result['parse_fk_hands_fps']:>10.0f} frames/s, + the 40 hand bodies (what capture "
              f"computes): {result['hands_ratio']:.2f}x")
        floor, floor_median = result["floor_fps"], result["floor_fps_median"]
        print(f"floor (struct) {floor:>10.0f} frames/s (median {floor_median:.0f})")
        print(f"ratio          {result['ratio']:>10.3f}")
        print(f"batched x{result['batch_size']:<4d}  {result['batch_fps']:>10.0f} frames/s")
        print(f"parse only     {result['parse_only_fps']:>10.0f} frames/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
