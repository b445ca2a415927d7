"""The drain's wait for the robot port's consumers (tools/pipeline/drain.py), fed the streamer's
status by the test: it waits for every acknowledging consumer that is there, never for one that
is gone, says where each stands, and ends when no frame is applied for ``stall_s``."""

from __future__ import annotations

import io
from typing import Any

from mocapline.core.counters import ConsumerCounts, StreamerCounts, to_json, zero
from mocapline.tools.pipeline.console import DrainDisplay
from mocapline.tools.pipeline.drain import DrainWait, wait_for_consumers


def consumer(acked: int, to_apply: int, connected: bool = True, acknowledges: bool = True) -> ConsumerCounts:
    return zero(ConsumerCounts, connected=connected, acknowledges=acknowledges, frames_acked=acked,
                frames_to_apply=to_apply, backlog=to_apply + (1 if to_apply else 0))


def status(ended: bool = True, **consumers: ConsumerCounts) -> dict[str, Any]:
    return to_json(zero(StreamerCounts, ended=ended, consumers=consumers))


class Answers:
    """The streamer's answers, one per ask; the last one repeats."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.asked = 0

    def __call__(self) -> dict[str, Any]:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_the_wait_ends_when_every_consumer_there_has_applied_the_take() -> None:
    ask = Answers(status(False, viewer=consumer(100, 1654)), status(viewer=consumer(619, 1135)),
                  status(viewer=consumer(1754, 0)), status(viewer=consumer(1754, 0)))
    lines: list[str] = []
    wait = wait_for_consumers(ask, DrainWait(), lambda w: lines.append(w.line()), poll_s=0)
    assert wait.complete and not wait.stalled and ask.asked == 3
    assert lines[0].startswith("the streamer has not had the take's end yet, viewer 100 of 1754 applied, waiting")
    assert lines[1].startswith("viewer 619 of 1754 applied, waiting ")
    assert wait.not_applied() == "every frame was applied"


def test_a_consumer_gone_is_not_waited_for_and_is_said_to_keep_its_frames() -> None:
    ask = Answers(status(viewer=consumer(1754, 0), robot=consumer(619, 1135, connected=False),
                         push=consumer(0, 0, acknowledges=False)))
    wait = wait_for_consumers(ask, DrainWait(), poll_s=0)
    assert wait.complete and ask.asked == 1
    assert [c.name for c in wait.gone] == ["robot"]
    assert wait.line().startswith("every consumer there has applied the take, robot gone (1135 frames kept for it), "
                                  "waited ")
    assert wait.not_applied() == ("not applied: robot 1135 of 1754 (gone); they wait in the streamer's log for "
                                  "each consumer's return")


def test_a_consumer_there_that_applies_nothing_ends_the_wait_after_stall_s() -> None:
    ask = Answers(status(viewer=consumer(619, 1135)))
    wait = wait_for_consumers(ask, DrainWait(), stall_s=0.05, poll_s=0.01)
    assert wait.stalled and not wait.complete and ask.asked > 1
    assert wait.not_applied().startswith("not applied: viewer 1135 of 1754;")


def test_without_consumers_the_wait_is_the_take_reaching_the_streamer() -> None:
    assert wait_for_consumers(Answers(status(False), status()), DrainWait(), poll_s=0).complete
    assert wait_for_consumers(Answers(status(False)), DrainWait(), end_s=0.05, poll_s=0.01).stalled


def test_the_display_says_the_wait_on_a_log_when_it_changes_and_then_and_again_every_few_seconds() -> None:
    out = io.StringIO()
    display = DrainDisplay(out, interactive=False, every_s=3600)
    wait = DrainWait()
    for acked in (619, 700, 1754):
        wait.update(zero(StreamerCounts, ended=True, consumers={"viewer": consumer(acked, 1754 - acked)}))
        display.show(wait)
    display.close(wait)
    lines = out.getvalue().splitlines()
    assert [line.rsplit(", ", 1)[0] for line in lines] == [
        "mocapline: draining: viewer 619 of 1754 applied",  # 700: the same consumer waited for, said soon after
        "mocapline: draining: every consumer there has applied the take"]
    assert lines[-1].endswith(" s") and ", waited " in lines[-1]
    quiet = io.StringIO()
    nothing = DrainWait()
    nothing.update(zero(StreamerCounts, ended=True, consumers={"viewer": consumer(10, 0)}))
    DrainDisplay(quiet, interactive=False).show(nothing)
    assert quiet.getvalue() == ""  # nothing to wait for: nothing said
