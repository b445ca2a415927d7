"""Each stage's heartbeat, control answer and final line, as one typed record per stage.

The published names are the ledger's (docs/ledger.md) and stay as they are on the wire, in files
and in /metrics; the ``Metric`` in a field's metadata is where core/metrics.py mirrors it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mocapline.core.counters.codec import Metric, wire
from mocapline.core.counters.links import ConsumerCounts, DurableCounts

FRAMES_IN = Metric("mocapline_frames_total", (("direction", "in"),))
FRAMES_OUT = Metric("mocapline_frames_total", (("direction", "out"),))
PENDING = Metric("mocapline_pending")
LAST_INDEX = Metric("mocapline_last_posture_index", initial=-1)
REJECTED = Metric("mocapline_rejected_total", key_label="reason")
PERFORMER_FRAMES = Metric("mocapline_performer_frames_total")
FRAME_ID_GAPS = Metric("mocapline_link_frame_id_gaps_total")

Ranges = list[list[int]]


# --- capture ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SegmentCounts:
    """A run of posture indices between backward jumps."""

    segment: int = wire()
    first_index: int | None = wire()
    last_index: int | None = wire()
    unique_frames: int = wire()
    missing_indices: int = wire()


@dataclass(frozen=True)
class PathCounts:
    """One receive path's ledger (a UDP port, or the TCP stream), in --ports order."""

    role: str = wire()
    received: int = wire(name="source_received")
    unique_frames: int = wire(name="source_unique_frames")
    missing_indices: int = wire(name="source_missing_indices")
    duplicate_indices: int = wire(name="source_duplicate_indices")
    backward_indices: int = wire(name="source_backward_indices")
    first_index: int | None = wire(name="source_first_index")
    last_index: int | None = wire(name="source_last_index")
    missing_ranges: Ranges = wire(name="source_missing_ranges")
    segments: int = wire(name="source_segments")


@dataclass(frozen=True)
class SideLedger:
    """The auditor's own side-path listener: the posture indices it saw (one performer's, or all)."""

    received: int = wire(name="source_received")
    unique_frames: int = wire(name="source_unique_frames")
    missing_indices: int = wire(name="source_missing_indices")
    duplicate_indices: int = wire(name="source_duplicate_indices")
    backward_indices: int = wire(name="source_backward_indices")
    first_index: int | None = wire(name="source_first_index")
    last_index: int | None = wire(name="source_last_index")
    missing_ranges: Ranges = wire(name="source_missing_ranges")
    segments: int = wire(name="source_segments")


@dataclass(frozen=True)
class SidePathCounts(SideLedger):
    """The side path's ledger, performers combined, with each performer's and the datagrams it
    could not read."""

    rejected_datagrams: int = wire(0)
    performers: dict[str, SideLedger] = wire({})


@dataclass(frozen=True)
class CapturePerformerCounts:
    """One performer's ledger (avatar_index / Xsens character ID)."""

    avatar_index: int = wire()
    avatar_name: str = wire()
    source_received: int = wire()
    source_unique_frames: int = wire(metric=PERFORMER_FRAMES)
    source_missing_indices: int = wire()
    source_duplicate_indices: int = wire()
    source_backward_indices: int = wire()
    first_posture_index: int | None = wire()
    last_posture_index: int | None = wire()
    missing_ranges: Ranges = wire()
    segments: int = wire()
    per_segment: list[SegmentCounts] = wire()
    cross_path_copies: int = wire()
    late_frames: int = wire()
    late_ranges: Ranges = wire()
    input_pending: int = wire()
    paths: dict[str, PathCounts] = wire()
    human_height_m: float | None = wire(None, omit_none=True)  # Xsens: the height MXTP13 scaling gave (issue 23)


@dataclass(frozen=True)
class PropCounts:
    """An Xsens character that streams props only: its samples and the props in its latest one."""

    samples: int = wire()
    segments: int = wire()
    name: str | None = wire(None, omit_none=True)  # its MXTP12 name (a tracked object's, say), once one came


@dataclass(frozen=True)
class UnitCheck:
    """Xsens: the first frame's pelvis height, and the position unit it was read in."""

    position_unit: str = wire()
    read_as: str = wire()
    pelvis_height_m: float = wire()
    plausible: bool = wire()
    suggested_unit: str | None = wire()
    scale: float = wire()


@dataclass(frozen=True)
class TcpSourceCounts:
    """Axis over TCP: capture's connection to Axis Studio's server and the stream's framing."""

    server: str = wire()
    connected: bool = wire(metric=Metric("mocapline_source_connected"))
    connects: int = wire(metric=Metric("mocapline_source_connects_total"))
    disconnects: int = wire()
    failed_attempts: int = wire()
    bytes: int = wire()
    last_error: str = wire()
    datagrams: int = wire()
    rejected_chunks: int = wire()
    junk_bytes: int = wire()
    resyncs: int = wire()


@dataclass(frozen=True, kw_only=True)
class CaptureCounts:
    """Capture's ledger (docs/ledger.md): what arrived, what was released, and where each index went."""

    source_received: int = wire(metric=FRAMES_IN)
    source_unique_frames: int = wire(metric=Metric("mocapline_source_unique_frames_total"))
    source_missing_indices: int = wire(metric=Metric("mocapline_source_missing_indices_total"))
    source_duplicate_indices: int = wire(metric=Metric("mocapline_source_duplicate_indices_total"))
    source_backward_indices: int = wire(metric=Metric("mocapline_source_backward_indices_total"))
    rejected_datagrams: int = wire()
    first_posture_index: int | None = wire()
    last_posture_index: int | None = wire(metric=LAST_INDEX)
    missing_ranges: Ranges = wire()
    segments: int = wire()
    per_segment: list[SegmentCounts] = wire()
    cross_path_copies: int = wire(metric=Metric("mocapline_source_cross_path_copies_total"))
    late_frames: int = wire(metric=Metric("mocapline_source_late_frames_total"))
    late_ranges: Ranges = wire()
    rejected_by_reason: dict[str, int] = wire(metric=REJECTED)
    split_frames: int = wire(0)  # frames (MVN samples) that came as several datagrams and were joined
    input_pending: int = wire(metric=PENDING)
    released_frames: int = wire(name="human_frames_out")  # released by the merge (FK done), this process
    paths: dict[str, PathCounts] = wire()
    performers: dict[str, CapturePerformerCounts] = wire(per_performer=True)
    props: dict[str, PropCounts] | None = wire(None, omit_none=True)  # Xsens props-only characters
    meta_datagrams: dict[str, int] | None = wire(None, omit_none=True)  # Xsens MXTP12 / MXTP13 taken in
    unit_check: UnitCheck | None = wire(None, omit_none=True)
    rcvbuf_granted: dict[str, int] = wire({})
    tcp: TcpSourceCounts | None = wire(None, omit_none=True)
    human_frames_sent: int = wire(0, metric=FRAMES_OUT)
    session_id: str = wire("")
    durable: DurableCounts | None = wire(None, omit_none=True)
    metrics_port: int | None = wire(None, omit_none=True)
    metrics_host: str | None = wire(None, omit_none=True)  # an automatic port's host, when not the default


# --- retarget --------------------------------------------------------------------------------

@dataclass(frozen=True)
class FrameIdCounts:
    """The continuity of the frame_id numbers on a stage's input link."""

    received: int = wire(name="frame_id_received")
    unique_frames: int = wire(name="frame_id_unique_frames")
    missing_indices: int = wire(name="frame_id_missing_indices", metric=FRAME_ID_GAPS)
    duplicate_indices: int = wire(name="frame_id_duplicate_indices")
    backward_indices: int = wire(name="frame_id_backward_indices")
    first_index: int | None = wire(name="frame_id_first_index")
    last_index: int | None = wire(name="frame_id_last_index")
    missing_ranges: Ranges = wire(name="frame_id_missing_ranges")
    segments: int = wire(name="frame_id_segments")


@dataclass(frozen=True)
class RetargetPerformerCounts:
    """One performer's frames through its IK (``avatar_name`` absent in the workers' sum)."""

    avatar_name: str | None = wire(None, omit_none=True)
    human_height_m: float | None = wire(None)  # the height it retargets at (null: the config's assumption)
    frames_in: int = wire(0)
    gmr_processed: int = wire(0, metric=PERFORMER_FRAMES)
    robot_frames_sent: int = wire(0)
    pending: int = wire(0)


@dataclass(frozen=True)
class HandCounts:
    """The hand stage of a retarget with a hands build (services/retarget/hands.py): frames whose
    HumanFrame had hand bodies (``frames``) or none (``without_hands``: the hands at rest), and its
    cost per frame."""

    frames: int = wire(0)
    without_hands: int = wire(0)
    ms_mean: float = wire(0.0)
    ms_max: float = wire(0.0)


@dataclass(frozen=True)
class RobotHandCounts:
    """The bridge's hands (``mocapline robot --hands dex3``, services/robot/hands.py)."""

    kind: str = wire("dex3")
    frames: int = wire(0)  # frames whose hand joints were taken (as the body reached them)
    commands_sent: int = wire(0)  # HandCmd_ pairs (left and right)
    states_received: int = wire(0)  # HandState_ samples read
    states_rejected: int = wire(0)
    last_posture_index: int | None = wire(None)
    tracking_error_mean_rad: float = wire(0.0)  # |measured - commanded| over the last 200 states
    tracking_error_max_rad: float = wire(0.0)


@dataclass(frozen=True)
class WorkerInfo:
    """A retarget worker: its name, its performers and its part in takeovers and handovers."""

    name: str = wire()
    endpoint: str = wire()
    owned: list[int] = wire()
    live_workers: list[str] = wire()
    takeovers: int = wire()
    handovers: int = wire()
    releasing: list[int] = wire()
    forgotten: int = wire()
    skipped: int = wire()


@dataclass(frozen=True)
class RetargetCounts:
    """The retarget stage (or one worker): HumanFrames in, RobotFrames out."""

    frames_in: int = wire(metric=FRAMES_IN)
    gmr_processed: int = wire()  # through the IK, ik_failed ones included: one per frame in
    robot_frames_sent: int = wire(metric=FRAMES_OUT)
    ik_failed: int = wire(metric=Metric("mocapline_ik_failed_total"))
    decode_errors: int = wire(metric=Metric("mocapline_rejected_total", (("reason", "decode"),)))
    ends_forwarded: int = wire()
    takes: int = wire()
    last_posture_index: int | None = wire()
    last_sent_posture_index: int | None = wire(metric=LAST_INDEX)  # kept across END_OF_STREAM
    ik_ms_max: float = wire()
    last_error: str = wire()
    ik_ms_mean: float = wire()
    pending: int = wire(metric=PENDING)
    rejected_by_reason: dict[str, int] = wire(metric=REJECTED)
    input_link: FrameIdCounts = wire()
    performers: dict[str, RetargetPerformerCounts] = wire(per_performer=True)
    worker: WorkerInfo | None = wire(None, omit_none=True)
    durable: DurableCounts | None = wire(None, omit_none=True)
    metrics_port: int | None = wire(None, omit_none=True)
    metrics_host: str | None = wire(None, omit_none=True)  # an automatic port's host, when not the default
    hands: HandCounts | None = wire(None, omit_none=True)  # a build with hands only


@dataclass(frozen=True)
class WorkerShare:
    """One worker's line in the ledger: the performers it owns and the frames it retargeted."""

    owned: list[int] = wire()
    frames: int = wire()
    takeovers: int = wire()


@dataclass(frozen=True)
class RetargetTotals:
    """Retarget as workers: the ledger's retarget line, their per-performer counts summed."""

    frames_in: int = wire()
    gmr_processed: int = wire()
    robot_frames_sent: int = wire()
    ik_failed: int = wire()
    pending: int = wire()
    performers: dict[str, RetargetPerformerCounts] = wire()
    workers: dict[str, WorkerShare] = wire()


# --- streamer --------------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamerPerformerCounts:
    avatar_name: str = wire()
    frames_in: int = wire()
    motion_generated: int = wire()
    zmq_sent: int = wire(metric=PERFORMER_FRAMES)
    pending: int = wire()


@dataclass(frozen=True)
class FanInInfo:
    """The streamer reading every retarget worker: who, and how far in each."""

    workers: list[str] = wire()
    live: list[str] = wire()
    duplicates: int = wire()
    positions: dict[str, int] = wire()


def _backlog_max(consumers: dict[str, ConsumerCounts] | None) -> float:
    return max((c.backlog for c in (consumers or {}).values()), default=0)


def _evicted(consumers: dict[str, ConsumerCounts] | None) -> float:
    return sum(c.evicted for c in (consumers or {}).values())


@dataclass(frozen=True)
class StreamerCounts:
    """The streamer: RobotFrames in, MocapFrames made (motion_generated) and where each is now:
    acknowledged (zmq_sent), on the wire unacknowledged (unconfirmed), or waiting (pending)."""

    frames_in: int = wire(metric=FRAMES_IN)
    ik_failed_in: int = wire()
    motion_generated: int = wire()
    zmq_sent: int = wire(metric=FRAMES_OUT)
    takes_ended: int = wire()
    out_base: int = wire()
    bridged_frames: int = wire()
    last_posture_index: int | None = wire(metric=LAST_INDEX)
    pending: int = wire(metric=PENDING)
    ended: bool = wire()
    input_fps: float = wire()
    output_fps: float = wire()
    performers: dict[str, StreamerPerformerCounts] = wire(per_performer=True)
    rejected_by_reason: dict[str, int] = wire(metric=REJECTED)
    unconfirmed: int = wire(0, metric=Metric("mocapline_unconfirmed"))
    consumers: dict[str, ConsumerCounts] | None = wire(
        None, omit_none=True, metric=(Metric("mocapline_consumer_backlog_max", derive=_backlog_max),
                                      Metric("mocapline_consumers_evicted", derive=_evicted)))
    durable: DurableCounts | None = wire(None, omit_none=True)
    fan_in: FanInInfo | None = wire(None, omit_none=True)
    metrics_port: int | None = wire(None, omit_none=True)
    metrics_host: str | None = wire(None, omit_none=True)  # an automatic port's host, when not the default

    @property
    def on_the_wire(self) -> int:
        """Frames handed to the wire, acknowledged or not yet: a consumer applies a frame before
        its acknowledgement arrives, so no downstream count exceeds this (the ledger's
        ``PipelineLedger.on_the_wire``)."""
        return self.zmq_sent + self.unconfirmed


# --- viewer ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ViewerPerformerCounts:
    viewer_applied: int = wire(metric=PERFORMER_FRAMES)
    avatar_name: str = wire()


@dataclass(frozen=True)
class ViewerCounts:
    """The viewer: MocapFrames that passed every check (viewer_received) and applied."""

    viewer_received: int = wire(metric=FRAMES_IN)
    viewer_applied: int = wire(metric=FRAMES_OUT)
    crc_invalid: int = wire()
    rejected_by_reason: dict[str, int] = wire(metric=REJECTED)
    frame_id_gaps: int = wire(metric=FRAME_ID_GAPS)
    frame_id_duplicates: int = wire()
    frame_id_backward: int = wire()
    frame_id_missing_ranges: Ranges = wire()
    sender_restarts: int = wire()
    last_posture_index: int | None = wire(metric=LAST_INDEX)
    latency_p50_ms: float | None = wire()
    latency_p99_ms: float | None = wire()
    performers: dict[str, ViewerPerformerCounts] = wire(per_performer=True)
    viewer_pending: int = wire(0, metric=PENDING)
    ended: bool = wire(False)
    durable: DurableCounts | None = wire(None, omit_none=True)
    metrics_port: int | None = wire(None, omit_none=True)
    metrics_host: str | None = wire(None, omit_none=True)  # an automatic port's host, when not the default
    # With --robot-domain (the page's physics robot, docs/robot.md): LowState read while a page watches.
    lowstate_received: int | None = wire(None, omit_none=True)
    lowstate_skipped: int | None = wire(None, omit_none=True)
    lowstate_rejected: int | None = wire(None, omit_none=True)
    lowstate_rejected_by_reason: dict[str, int] | None = wire(None, omit_none=True)
    lowstate_reader_opens: int | None = wire(None, omit_none=True)
    lowstate_reading: bool | None = wire(None, omit_none=True)
    base_received: int | None = wire(None, omit_none=True)  # mocapline sim's base poses (mocapline/sim/base_state)


# --- robot -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrackingError:
    """A joint group's |commanded - measured| over the last window, in radians."""

    mean: float = wire()
    p50: float = wire()
    p99: float = wire()


@dataclass(frozen=True)
class PolicyCounts:
    """The policy controller's own figures (`mocapline robot --controller policy`)."""

    name: str = wire()  # the policy description's name
    policy_steps: int = wire()
    policy_rate_hz: float = wire()  # steps in the last second
    inference_p50_ms: float | None = wire()  # over the last 2000 steps
    inference_p99_ms: float | None = wire()
    # deg: the take's rest pitch taken off the reference's (policy/rest_lean.py); None: none yet
    rest_lean_deg: float | None = wire(None)


@dataclass(frozen=True)
class RobotCounts:
    """The robot bridge (`mocapline robot`, docs/robot.md): frames taken from the robot port
    (robot_received) and whose target reached a motor command (robot_applied), and its control loop."""

    robot_received: int = wire(metric=FRAMES_IN)
    robot_applied: int = wire(metric=FRAMES_OUT)
    rejected_by_reason: dict[str, int] = wire(metric=REJECTED)
    commands_sent: int = wire(metric=Metric("mocapline_robot_commands_total"))
    command_rate_hz: float = wire()
    command_rate_mean_hz: float | None = wire()
    period_p99_ms: float | None = wire()
    deadline_misses: int = wire(metric=Metric("mocapline_robot_deadline_misses_total"))
    clamps_by_reason: dict[str, int] = wire()
    stalls: int = wire(metric=Metric("mocapline_robot_stalls_total"))
    damped_s: float = wire()
    catchup_ticks: int = wire(metric=Metric("mocapline_robot_catchup_ticks_total"))
    estops: int = wire(metric=Metric("mocapline_robot_estops_total"))
    transitions: dict[str, int] = wire()
    lowstate_received: int = wire()
    lowstate_rejected_by_reason: dict[str, int] = wire()
    lowstate_unsealed: int = wire()  # LowStates with crc 0 (Unitree's simulators do not seal them), taken
    tracking_error_rad: dict[str, TrackingError] = wire()
    latency_p50_ms: float | None = wire()
    latency_p99_ms: float | None = wire()
    last_posture_index: int | None = wire(metric=LAST_INDEX)
    robot_state: str = wire()
    bridge_pending: int = wire(metric=PENDING)
    lag_s: float = wire()
    ended: bool = wire()
    controller: str = wire("pd")  # --controller: pd | policy | arm-sdk
    falls: int = wire(0, metric=Metric("mocapline_robot_falls_total"))  # the policy controller's
    policy: PolicyCounts | None = wire(None, omit_none=True)
    arm_sdk_weight: float | None = wire(None, omit_none=True)  # arm-sdk: the blend weight sent last
    hands: RobotHandCounts | None = wire(None, omit_none=True)  # --hands dex3
    # the robot's own clock (its LowState tick, ms) when the take's first and last applied frame
    # reached a command: the take's window on the robot (bench robot measures the base over it)
    applied_ticks_ms: list[int] | None = wire(None, omit_none=True)
    durable: DurableCounts | None = wire(None, omit_none=True)
    metrics_port: int | None = wire(None, omit_none=True)
    metrics_host: str | None = wire(None, omit_none=True)


# --- auditor ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class AuditorBeat:
    """The auditor's heartbeat: the current verdict (1 conserved, 0 not, None before the first)."""

    verdict: int | None = wire()


StageCounts = CaptureCounts | RetargetCounts | StreamerCounts | ViewerCounts | RobotCounts
STAGE_TYPES: dict[str, type[StageCounts]] = {
    "capture": CaptureCounts, "retarget": RetargetCounts, "streamer": StreamerCounts, "viewer": ViewerCounts,
    "robot": RobotCounts,
}
