"""`mocapline emit --format mvn`: a synthetic Xsens MVN network streamer, for trying the Xsens path
without a suit.

The performer moves as in the Axis take (``motion.pose_channels``, walking in place with arm
raises): the Axis Studio skeleton, scaled to ``--height``, is posed by capture's own forward
kinematics (``AxisForwardKinematics.all_bones``) and each bone's world pose is re-expressed as MVN
sends it: Z-up metres, the subject facing +X (left = +Y), every segment frame equal to the world
frame in the N-pose (arms hanging, palms in). So a bone's MVN orientation is
``W R(t) R_N^T W^T``, with ``R_N`` the bone's rotation in the N-pose and ``W`` the yaw from Axis'
facing (-Y) to MVN's (+X). The 23 body segments come from the bones GMR reads (the MXTP02 encoder
holds the segment map); the two MVN has and Axis Studio lacks are made up: T8 (Spine3) half-way
between Spine2 and Neck with Spine2's rotation, each toe at the ball of its foot. Gloves add the
40 finger segments from the Axis hand bones (carpus = hand, thumb 1-3, each finger's in-hand bone
and phalanges 1-3).

Per sample MVN sends one MXTP02 per character: the suits (character ids 0..N-1, with fingers under
``--gloves``), then ``--props`` characters carrying only a prop (segment id 24) held in a suit's
right hand. Once a second (and before the first sample) it repeats its meta data: MXTP12 with each
character's name, and per suit MXTP13, the null pose's 23 segment origins and, as a second
datagram, the points whose span is the height (top of the head, the heels on the floor), so the
height capture reads from it is ``--height``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mocapline.core import quat
from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX
from mocapline.core.options import EnvArgumentParser, flags_given, non_negative_int, positive_float
from mocapline.formats.mxtp02 import N_SEGMENTS, XSENS_SEGMENTS, XSENS_TO_GMR, encode_mxtp02
from mocapline.formats.mxtp_meta import ScalePoint, encode_meta, encode_scaling
from mocapline.formats.skeleton import SkeletonKind, get_skeleton
from mocapline.services.capture.fk import AxisForwardKinematics, matrices_to_quaternions
from mocapline.tools.emitter.motion import pose_channels
from mocapline.tools.emitter.take import EmitStats, Pacer, TakePlan, performer_name

REFERENCE_HEIGHT_M = 1.727  # the Axis Studio skeleton's crown above its soles
ROTATION_ORDER = "YXZ"
PROP_SEGMENT_ID = N_SEGMENTS + 1
YAW_TO_MVN = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # facing -Y -> facing +X
N_POSE_ARMS = {"LeftArm": -90.0, "RightArm": 90.0}  # degrees about the Axis forward axis: arms down
TOE_OFFSET = np.array([0.14, 0.0, -0.05])  # ball of the foot from the ankle, MVN foot frame, m at 1.727 m
PROP_GRIP = np.array([0.0, 0.0, -0.12])  # a held prop's origin from the hand, MVN hand frame, m
META_EVERY_S = 1.0
# Flags only the Axis mode reads: given under --format mvn they are refused (and the MVN ones under axis).
AXIS_ONLY = ("tcp_listen", "tcp_hold_s", "tcp_cut", "garbage", "rotation_order", "skeleton", "legacy_header",
             "version", "split", "split_every", "lose_head", "lose_tail", "no_displacement", "with_reference",
             "replay", "demo", "loop", "write", "seed")
MVN_ONLY = ("gloves", "props", "names", "height")


@dataclass(frozen=True)
class MvnPose:
    """One performer's sample: body (23, 3) / (23, 4) in GMR_BODIES order, fingers (40, ...) in
    HAND_BODIES order; metres, Z-up, quaternions w x y z."""

    positions: np.ndarray
    quaternions: np.ndarray
    finger_positions: np.ndarray
    finger_quaternions: np.ndarray


class MvnBody:
    """The Axis Studio skeleton scaled to ``height_m`` and posed in MVN's conventions."""

    def __init__(self, height_m: float = 1.75) -> None:
        self.skeleton = get_skeleton(SkeletonKind.AXIS_STUDIO)
        self.fk = AxisForwardKinematics(self.skeleton, ROTATION_ORDER)
        self.height_m = height_m
        self.scale = height_m / REFERENCE_HEIGHT_M
        names = self.skeleton.names
        sources = self.skeleton.gmr_source_bones()
        self.body_bones = np.array([s if s is not None else 0 for s in sources])
        hand_bones = self.skeleton.hand_source_bones()
        assert hand_bones is not None, "the Axis Studio skeleton has every finger bone"
        self.finger_bones = np.array(hand_bones)
        self.spine2, self.neck = names.index("Spine2"), names.index("Neck")
        n_pose = self._channels_at_rest()
        for bone, angle in N_POSE_ARMS.items():
            n_pose[names.index(bone), 3 + ROTATION_ORDER.index("Z")] = angle
        _, rotations = self.fk.all_bones(n_pose)
        self._to_mvn = rotations.transpose(0, 2, 1) @ YAW_TO_MVN.T  # R_N^T W^T, per bone
        self.null_positions, _ = self._bodies(*self.world(n_pose))  # every rotation the identity

    def _channels_at_rest(self) -> np.ndarray:
        channels = np.zeros((len(self.skeleton.bones), 6))
        channels[:, :3] = self.skeleton.offsets_cm
        return channels

    def _bodies(self, positions: np.ndarray, rotations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bone world poses (MVN frame) -> the 23 segments, with T8 and the toes made up."""
        pos, rot = positions[self.body_bones].copy(), rotations[self.body_bones].copy()
        pos[GMR_BODY_INDEX["Spine3"]] = 0.5 * (positions[self.spine2] + positions[self.neck])
        for side in ("Left", "Right"):
            foot = GMR_BODY_INDEX[f"{side}Foot"]
            pos[GMR_BODY_INDEX[f"{side}Toe"]] = pos[foot] + rot[foot] @ (TOE_OFFSET * self.scale)
        return pos, rot

    def world(self, channels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Axis channels -> every bone's MVN position (n, 3) and rotation (n, 3, 3)."""
        positions, rotations = self.fk.all_bones(channels)
        return self.scale * positions @ YAW_TO_MVN.T, YAW_TO_MVN @ rotations @ self._to_mvn

    def pose(self, t: float, speed: float = 1.0) -> MvnPose:
        positions, rotations = self.world(pose_channels(self.skeleton, ROTATION_ORDER, t, speed))
        body_pos, body_rot = self._bodies(positions, rotations)
        return MvnPose(body_pos, matrices_to_quaternions(body_rot), positions[self.finger_bones],
                       matrices_to_quaternions(rotations[self.finger_bones]))

    def scaling(self, character_id: int) -> list[bytes]:
        """MXTP13: the null pose's segment origins, then the head-top and heel points (its height)."""
        by_body = dict(zip(GMR_BODIES, self.null_positions, strict=True))
        segments = {name: tuple(float(v) for v in by_body[XSENS_TO_GMR[name]]) for name in XSENS_SEGMENTS}
        head, heels = segments["Head"][2], segments["LeftFoot"][2]
        points = (ScalePoint(XSENS_SEGMENTS.index("Head") + 1, 0, "pTopOfHead", 0, (0.0, 0.0, self.height_m - head)),
                  *(ScalePoint(XSENS_SEGMENTS.index(f"{side}Foot") + 1, 0, f"p{side}HeelFloor", 0, (0.0, 0.0, -heels))
                    for side in ("Right", "Left")))
        return encode_scaling(character_id, segments, points)  # type: ignore[arg-type]


@dataclass
class MvnTake:
    """What the streamer has: suits, gloves, props, names and heights (per suit, the last repeated)."""

    performers: int = 1
    gloves: bool = False
    props: int = 0
    names: list[str] = field(default_factory=list)
    heights_m: list[float] = field(default_factory=lambda: [1.75])
    speed: float = 1.0

    def name(self, character: int) -> str:
        if character < len(self.names) and self.names[character]:
            return self.names[character]
        return performer_name(character) if character < self.performers else f"Prop{character - self.performers + 1}"

    def height(self, performer: int) -> float:
        return self.heights_m[min(performer, len(self.heights_m) - 1)]


class MvnStreamer:
    """The datagrams MVN sends: ``meta`` (MXTP12 for every character, MXTP13 per suit) and one
    ``sample`` (MXTP02 per character)."""

    def __init__(self, take: MvnTake) -> None:
        self.take = take
        self.bodies = [MvnBody(take.height(k)) for k in range(take.performers)]

    def meta(self) -> list[bytes]:
        names = [encode_meta(c, {"name": self.take.name(c)}) for c in range(self.take.performers + self.take.props)]
        return names + [d for k, body in enumerate(self.bodies) for d in body.scaling(k)]

    def poses(self, t: float) -> list[MvnPose]:
        return [body.pose(t + 0.7 * k, self.take.speed) for k, body in enumerate(self.bodies)]

    def sample(self, index: int, t: float, poses: list[MvnPose] | None = None) -> list[bytes]:
        poses = poses if poses is not None else self.poses(t)
        code = int(round(t * 1000.0))
        out = [encode_mxtp02(index, p.positions, p.quaternions, time_code_ms=code, character_id=k,
                             fingers=(p.finger_positions, p.finger_quaternions) if self.take.gloves else None)
               for k, p in enumerate(poses)]
        for j in range(self.take.props):
            holder = poses[j % len(poses)]
            hand = GMR_BODY_INDEX["RightHand"]
            grip = quat.rotate(holder.quaternions[hand], PROP_GRIP)
            prop = (np.array([PROP_SEGMENT_ID]), holder.positions[hand:hand + 1] + grip,
                    holder.quaternions[hand:hand + 1])
            out.append(encode_mxtp02(index, None, None, time_code_ms=code, character_id=self.take.performers + j,
                                     props=prop))
        return out


def emit_mvn(plan: TakePlan, take: MvnTake, dests: list[tuple[str, int]], *, rate_hz: float = 60.0,
             stop: threading.Event | None = None) -> EmitStats:
    """Stream the take to every destination (the first "main", the second "side" for the plan's
    skips), meta data before the first sample and every second of samples after."""
    streamer = MvnStreamer(take)
    fps = rate_hz if rate_hz > 0 else 60.0
    meta_every = max(1, round(META_EVERY_S * fps))
    stats = EmitStats(datagrams={f"{h}:{p}": 0 for h, p in dests})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        def udp_send(to: tuple[str, int]) -> Callable[[bytes], object]:
            return lambda data: sock.sendto(data, to)

        sends = [(f"{h}:{p}", udp_send((h, p))) for h, p in dests]
        pacer = Pacer(rate_hz)
        last, frame = None, []
        for index in plan.indices():
            if stop is not None and stop.is_set():
                break
            pacer.wait()
            if index != last:
                t = (index - plan.first_index) / fps
                if stats.frames % meta_every == 0:
                    for name, send in sends:
                        for data in streamer.meta():
                            send(data)
                            stats.datagrams[name] += 1
                frame = streamer.sample(index, t)
                stats.frames += 1
                last = index
            for d, (name, send) in enumerate(sends):
                if plan.sends_to(d, index):
                    for character, data in enumerate(frame):
                        if plan.performs(character, index):
                            send(data)
                            stats.datagrams[name] += 1
    return stats


def add_format_argument(p: EnvArgumentParser) -> None:
    p.add_argument("--format", choices=("axis", "mvn"), default="axis",
                   help="axis: Axis Studio binary BVH; mvn: Xsens MVN, MXTP02 poses with MXTP12 names and MXTP13 "
                        "scaling (capture --source xsens, port 9763). The flags marked mvn: are read by mvn only; "
                        "the Axis ones (TCP, split, skeleton, version, garbage, replay, write...) by axis only")


def add_arguments(p: EnvArgumentParser) -> None:
    p.add_argument("--gloves", action="store_true",
                   help="mvn: finger tracking, 40 finger segments on every suit (23 + 40 segments, 2040 bytes)")
    p.add_argument("--props", type=non_negative_int, default=0, metavar="K",
                   help="mvn: K characters carrying only a prop (ids after the suits'), each held in a suit's "
                        "right hand")
    p.add_argument("--names", type=parse_names, default=[], metavar="A,B,...",
                   help="mvn: the characters' names sent in MXTP12, suits then props (default Performer1.., "
                        "Prop1..)")
    p.add_argument("--height", type=parse_heights, default=[1.75], metavar="M[,M...]",
                   help="mvn: each suit's height in m, sent as its MXTP13 scaling (one value, or one per suit, "
                        "the last repeated)")


def parse_names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]


def parse_heights(text: str) -> list[float]:
    heights = [positive_float(part) for part in text.split(",")]
    if not all(0.5 <= h <= 2.5 for h in heights):
        raise argparse.ArgumentTypeError(f"{text!r}: a person's height in m, 0.5-2.5")
    return heights


def foreign_flags(parser: EnvArgumentParser, args: argparse.Namespace) -> str | None:
    """Why the flags given (or set by MOCAPLINE_*) that the chosen --format does not read are
    refused, in one line; None when there are none."""
    other = "axis" if args.format == "mvn" else "mvn"
    given = flags_given(parser, args, AXIS_ONLY if other == "axis" else MVN_ONLY)
    return f"{', '.join(given)}: for --format {other} only, not read by --format {args.format}" if given else None


def main_mvn(args: argparse.Namespace, plan: TakePlan, dests: list[tuple[str, int]]) -> int:
    take = MvnTake(performers=args.performers, gloves=args.gloves, props=args.props, names=args.names,
                   heights_m=args.height, speed=args.speed)
    print(f"mocapline emit: streaming Xsens MVN (MXTP02/12/13) of {take.performers} suit(s)"
          f"{' with gloves' if take.gloves else ''}, {take.props} prop(s) to "
          f"{', '.join(f'{h}:{p}' for h, p in dests)}", file=sys.stderr, flush=True)
    try:
        stats = emit_mvn(plan, take, dests, rate_hz=args.rate)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"mocapline emit: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"frames": stats.frames, "datagrams": stats.datagrams}))
    return 0
