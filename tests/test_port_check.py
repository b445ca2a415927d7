"""`mocapline port-check` (issue 26): the scripted port passes a consumer written from
docs/protocol.md alone (tests/doc_consumer.py), `mocapline tap` and the viewer, and fails a
consumer that breaks each rule, one broken consumer per case; ``--port`` passes our port."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
from g1_facts import G1_JOINT_COUNT
from test_fanout import mocap

from mocapline.core.fanout import FanoutSender
from mocapline.core.header import MessageType
from mocapline.core.reliable import NO_EPOCH
from mocapline.core.segmentlog import LogConfig
from mocapline.core.stagelog import Output, StageLog, StageRecord
from mocapline.core.transport import lossless_socket
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.portcheck.consumer_cases import CASES, run_cases
from mocapline.tools.portcheck.port_checks import check_port
from mocapline.tools.portcheck.scripted import parse_report

pytestmark = pytest.mark.integration

DOC_CONSUMER = f"{sys.executable} {Path(__file__).with_name('doc_consumer.py')} {{endpoint}} {{name}} {{state}}"
CLI = f"{sys.executable} -m mocapline.cli"
BROKEN = {  # the rule each broken consumer breaks -> the case that must catch it
    "before_welcome": "late_join",
    "ignore_epoch": "new_epoch",
    "no_duplicate_check": "rewind",
    "any_welcome": "stale_welcome",
    "no_crc": "corrupt_crc",
    "apply_gaps": "frame_id_gap",
    "stop_at_end": "end_of_stream",
    "ack_before_store": "consumer_killed",
    "no_hello_again": "port_restarted",
}


def test_every_case_has_a_broken_consumer() -> None:
    assert sorted(BROKEN.values()) == sorted(c.name for c in CASES)


def test_the_report_lines() -> None:
    assert parse_report('{"frame_id": 3, "posture_index": 1003, "epoch": 7}') == (3, 1003)
    assert parse_report('{"frame_id": 4, "end": {"reason": "drain"}}') == (4, None)
    assert parse_report("mocapline tap: starting") is None
    assert parse_report('{"frame_id": 5, "posture_index": null}') is None


def documented_consumers() -> list[str]:
    """The command lines docs/protocol.md says `mocapline tap` and the viewer pass with."""
    doc = (Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    found = re.findall(r'^mocapline port-check --consumer "mocapline (\w+) (.*)"$', doc, re.M)
    assert [tool for tool, _ in found] == ["tap", "viewer"], found
    return [f"{CLI} {tool} {rest}" for tool, rest in found]


@pytest.mark.parametrize("consumer", [DOC_CONSUMER, *documented_consumers()], ids=["doc_consumer", "tap", "viewer"])
def test_port_check_passes(consumer) -> None:
    results = run_cases(consumer)
    assert [(r.name, r.passed) for r in results] == [(c.name, True) for c in CASES], [r.detail for r in results]


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_port_check_fails_a_consumer_that_breaks_a_rule(broken) -> None:
    [result] = run_cases(f"{DOC_CONSUMER} {broken}", [BROKEN[broken]])
    assert not result.passed, result.detail


def test_a_consumer_without_routing_id_passes_a_port_restart_and_its_own() -> None:
    """The routing id is optional (docs/protocol.md): a consumer that leaves it to ZeroMQ is told
    no RESTARTED and finds the port by its idle HELLO; its restart is a new connection."""
    results = run_cases(f"{DOC_CONSUMER} no_routing_id", ["consumer_killed", "port_restarted"])
    assert [(r.name, r.passed) for r in results] == [("consumer_killed", True), ("port_restarted", True)], \
        [r.detail for r in results]
    assert "RESTARTED not delivered" in results[1].detail


def test_a_consumer_that_reports_no_credit_passes_every_case() -> None:
    """TAKEN is optional (docs/protocol.md, "Flow control"): a consumer written before it, whose
    HELLOs and ACKs carry none, passes the contract as before."""
    results = run_cases(f"{DOC_CONSUMER} no_credit")
    assert [(r.name, r.passed) for r in results] == [(c.name, True) for c in CASES], [r.detail for r in results]


def test_a_consumer_that_dies_is_reported_with_its_status_and_stderr() -> None:
    crash = f"{sys.executable} -c \"import sys; print('robot: no /dev/g1', file=sys.stderr); sys.exit(3)\""
    [result] = run_cases(crash, ["late_join"])
    assert not result.passed
    assert "the consumer exited with status 3: robot: no /dev/g1" in result.detail, result.detail


@pytest.mark.timeout(120)
def test_a_consumer_that_exits_at_once_fails_every_case_without_waiting_for_it(monkeypatch) -> None:
    """docs/protocol.md's first template, written with `mocapline tap ... --state {state}`, failed
    all 9 cases ("[Errno 21] Is a directory"), each after waiting 10-15 s for a consumer that had
    already exited with status 2. With the waits an hour long, only a case that stops waiting once
    its consumer is gone finishes within the test's timeout."""
    from mocapline.tools.portcheck import consumer_cases

    monkeypatch.setattr(consumer_cases, "WAIT_S", 3600.0)
    results = run_cases(f"{CLI} tap --endpoint {{endpoint}} --name {{name}} --state {{state}}")
    assert [r.name for r in results] == [c.name for c in CASES] and not any(r.passed for r in results)
    for r in results:
        assert "the consumer exited with status 2" in r.detail and "Is a directory" in r.detail, r.detail


def test_the_documented_templates_give_state_as_the_folder_it_is() -> None:
    """Every `--state {state}` of a template in docs/protocol.md and `port-check --help` names a
    file in the folder (the prose quoting the failing form, in backticks, aside)."""
    from mocapline.tools.portcheck import cli

    doc = (Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    for text in (doc, cli.__doc__ or ""):
        after = re.findall(r"--state \{state\}(\S?)", text)
        assert after and all(a in ("/", "`") for a in after), after


def test_a_command_that_cannot_start_is_refused_before_any_case(capsys) -> None:
    from mocapline.tools.portcheck.cli import command_problem, main

    assert command_problem(DOC_CONSUMER) == ""
    assert "no such program" in command_problem("no-such-robot --endpoint {endpoint}")
    assert "{endpoint}, {name} and {state}" in command_problem(f"{sys.executable} --port {{port}}")
    assert main(["--consumer", "no-such-robot {endpoint}"]) == 2
    assert "no such program" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--consumer", DOC_CONSUMER, "--case", "no_such_case"])


def test_port_mode_passes_our_port(tmp_path) -> None:
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    ctx = zmq.Context()
    sock = lossless_socket(ctx, zmq.ROUTER, endpoint, bind=True)
    log = StageLog(tmp_path, "stage", LogConfig(fsync="never"))
    sender = FanoutSender(sock, log, G1_JOINT_COUNT, window=64)
    halt = threading.Event()

    def take() -> None:  # a take at ~200 Hz, pumped as the streamer does
        i = 0
        while not halt.is_set():
            sender.commit(StageRecord(NO_EPOCH, i, b"", [Output(MessageType.MOTION_FRAME, mocap(i), i)]))
            i += 1
            deadline = time.monotonic() + 0.005
            while time.monotonic() < deadline:
                sender.pump()
                sock.poll(1)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    try:
        results = check_port(endpoint)
    finally:
        halt.set()
        thread.join(5)
        sender.close()
        sock.close(linger=0)
        log.close()
        ctx.term()
    assert [(r.name, r.passed) for r in results] == [(n, True) for n in
                                                     ("handshake", "frames", "hands", "resume", "keep_alive", "rewind",
                                                      "v1_peer")], [r.detail for r in results]
