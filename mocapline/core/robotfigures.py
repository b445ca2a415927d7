"""The robot bridge's figures where people look: the ledger's ``robot`` block (`up`'s final output,
`status --json`), and the same block in words (`up`'s live table, `status`, the web page).

The bridge's heartbeat (``RobotCounts``) holds far more (its safety states, LowState counts); the
block is what tells whether the robot kept up: its command rate, the control loop's period and
missed deadlines, stalls and catch-up, clamps, tracking error by joint group, latency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mocapline.core.counters import RobotCounts, as_published

# The ledger's robot block, in the order it is read: the loop, the stream, the motion.
FIGURES: tuple[str, ...] = (
    "robot_state", "commands_sent", "command_rate_hz", "command_rate_mean_hz", "period_p99_ms",
    "deadline_misses", "stalls", "damped_s", "catchup_ticks", "clamps_by_reason", "estops",
    "latency_p50_ms", "latency_p99_ms", "tracking_error_rad",
)


def ledger_block(robot: RobotCounts) -> dict[str, Any]:
    """The bridge's figures as the ledger publishes them (JSON values); with ``--hands``, ``hands``."""
    published = as_published(robot)
    block = {name: published[name] for name in FIGURES}
    if published.get("hands") is not None:
        block["hands"] = published["hands"]
    return block


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def rows(block: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The block in words, one (label, value) a figure: what `up`, `status` and the page show."""
    clamps = block.get("clamps_by_reason") or {}
    tracking = block.get("tracking_error_rad") or {}
    mean_rate = block.get("command_rate_mean_hz")
    return [
        ("state", str(block.get("robot_state"))),
        ("LowCmd rate", f"{block.get('command_rate_hz'):.0f}/s" + (
            f" (mean {mean_rate:.1f}/s over {block.get('commands_sent')} commands)" if mean_rate is not None else "")),
        ("period p99", _ms(block.get("period_p99_ms"))),
        ("deadline misses", str(block.get("deadline_misses"))),
        ("stalls", f"{block.get('stalls')} (damped {block.get('damped_s')} s)"),
        ("catch-up ticks", str(block.get("catchup_ticks"))),
        ("clamps", ", ".join(f"{reason} {n}" for reason, n in sorted(clamps.items())) or "0"),
        ("latency p50 / p99", f"{_ms(block.get('latency_p50_ms'))} / {_ms(block.get('latency_p99_ms'))}"),
        ("tracking error p99", ", ".join(f"{group} {e['p99']:.3f} rad" for group, e in tracking.items()) or "-"),
        *_hand_rows(block.get("hands")),
    ]


def _hand_rows(hands: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    if not hands:
        return []
    error = f"{hands['tracking_error_mean_rad']:.3f} rad (max {hands['tracking_error_max_rad']:.3f})"
    return [("hands", f"{hands['kind']}: {hands['frames']} frames, {hands['commands_sent']} HandCmd_ pairs, "
                      f"{hands['states_received']} HandState_, tracking error mean {error}")]


def line(block: Mapping[str, Any]) -> str:
    """The block as one line (a live table's, a log's)."""
    return "; ".join(f"{label} {value}" for label, value in rows(block))
