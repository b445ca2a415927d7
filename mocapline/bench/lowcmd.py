"""``mocapline bench lowcmd``: what one LowCmd costs to put on DDS, the bridge's way and cyclonedds'.

The bridge writes a LowCmd every 2 ms. It keeps the command as a numpy record and turns it into CDR
bytes with a precomputed index map (``mocapline.robot.unitree.lowlevel``), then hands the bytes to
Cyclone DDS as they are. Side by side: the same message as cyclonedds' ``IdlStruct`` through its own
Python serializer (what ``DataWriter.write`` does before it sends), and the LowState read back both
ways. Needs the ``[robot]`` extra (cyclonedds 0.10).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from mocapline.bench.timing import per_call_us


def measure(number: int) -> dict[str, float]:
    from mocapline.robot.unitree.hg import LOW_CMD, LOW_STATE, new_low_state
    from mocapline.robot.unitree.idl_hg import LowCmd_, LowState_, MotorCmd_

    record = LOW_CMD.new()
    record["motor_cmd"]["mode"] = 1
    record["motor_cmd"]["kp"] = 60.0
    motors = [MotorCmd_(1, 0.1, 0.0, 0.0, 60.0, 1.0, 0) for _ in range(35)]
    # cyclonedds types its arrays as ``types.array``; at run time it takes lists
    message = LowCmd_(0, 0, motors, [0] * 4, 0)  # type: ignore[arg-type, unused-ignore]

    def ours() -> bytes:
        LOW_CMD.seal(record)
        return LOW_CMD.sample(record)

    state = new_low_state()
    LOW_STATE.seal(state)
    sample = LOW_STATE.sample(state)
    return {
        "lowcmd_ours_us": per_call_us(ours, number),
        "lowcmd_cyclonedds_us": per_call_us(message.serialize, number),
        "lowstate_ours_us": per_call_us(lambda: LOW_STATE.from_sample(sample), number),
        "lowstate_cyclonedds_us": per_call_us(lambda: LowState_.deserialize(sample), number),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mocapline bench lowcmd", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--number", type=int, default=2000, help="messages per timing (default 2000)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        result = measure(args.number)
    except ImportError:
        print("mocapline bench lowcmd: needs Cyclone DDS 0.10 (pip install -e '.[robot]', see README: The robot end)",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
        return 0
    print("per message, us (ours: numpy record + index map; cyclonedds: IdlStruct's Python serializer):")
    for key, value in result.items():
        print(f"  {key.removesuffix('_us'):<24} {value:8.1f}")
    print(f"  ratio, LowCmd out   {result['lowcmd_cyclonedds_us'] / result['lowcmd_ours_us']:8.1f}x")
    print(f"  ratio, LowState in  {result['lowstate_cyclonedds_us'] / result['lowstate_ours_us']:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
