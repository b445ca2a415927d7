"""Retarget scales a performer by the height its source measured (Xsens MXTP13 scaling, carried
as HumanFrame.human_height), unless --human-height or --performer-height says otherwise."""

from dataclasses import replace

import g1_facts as rm
import pytest

from mocapline.core.frames import HumanFrame
from mocapline.services.retarget import synthetic
from mocapline.services.retarget.config import load_ik_config
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.service import RetargetService


class Sink:
    next_frame_id = 0

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, payload: bytes, *, capture_timestamp_us: int) -> None:
        self.sent.append(payload)

    def send_end(self, payload: bytes = b"") -> None:
        pass

    def writable(self, timeout_ms: int = 0) -> bool:
        return True


@pytest.fixture(scope="module")
def setup():
    model = rm.load_ik_model()
    cfg = load_ik_config("xsens", model=model)
    truth = synthetic.robot_motion(3, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, cfg, model=model)
    return model, cfg, pos, quat


def frames(pos, quat, height: float, name: str = "Alice") -> list[HumanFrame]:
    return [HumanFrame(posture_index=k, capture_timestamp_us=k, positions=pos[k], quaternions=quat[k], source="xsens",
                       avatar_name=name, human_height=height) for k in range(len(pos))]


def heights(service: RetargetService) -> dict[int, float | None]:
    return {k: t.retargeter.human_height for k, t in service.tracks.items()}


def test_the_source_height_scales_the_performer(setup) -> None:
    model, cfg, pos, quat = setup
    service = RetargetService(Retargeter(cfg, model=model), Sink())
    for f in frames(pos, quat, 1.8):
        service.on_frame(f)
    assert heights(service) == {0: 1.8}
    assert service.tracks[0].counts().human_height_m == 1.8
    service.on_frame(replace(frames(pos, quat, 1.62)[0], posture_index=10))  # MVN sent a new scaling
    assert heights(service) == {0: 1.62}


def test_the_flags_override_the_source(setup) -> None:
    model, cfg, pos, quat = setup
    retargeter = Retargeter(cfg, model=model)
    retargeter.options = replace(retargeter.options, human_height=1.7)
    retargeter.set_human_height(1.7)
    service = RetargetService(retargeter, Sink())
    for f in frames(pos, quat, 1.8):
        service.on_frame(f)
    assert heights(service) == {0: 1.7}
    named = RetargetService(Retargeter(cfg, model=model), Sink(), heights={"Alice": 1.55})
    for f in frames(pos, quat, 1.8):
        named.on_frame(f)
    assert heights(named) == {0: 1.55}
