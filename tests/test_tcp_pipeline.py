"""Real processes over loopback TCP: `mocapline emit --tcp-listen` as Axis Studio's server,
`mocapline capture --transport tcp` as its client (started first, so it retries until the server
is up), connections dropped mid-datagram, garbage in the stream, and a UDP side path merged in."""

from __future__ import annotations

import json
import subprocess
import sys

from mocapline.tools.pipeline.procs import free_tcp_port


def test_capture_over_tcp_reconnects_and_merges_a_udp_side_path(capture_factory):
    axis_port = free_tcp_port()
    cap = capture_factory(1, ["--transport", "tcp", "--axis", f"127.0.0.1:{axis_port}"])
    emitter = subprocess.Popen(
        [sys.executable, "-m", "mocapline.cli", "emit", "--tcp-listen", str(axis_port),
         "--dest", f"127.0.0.1:{cap.ports[0]}", "--frames", "400", "--first-index", "1000", "--rate", "400",
         "--tcp-cut", "1150,1300", "--garbage", "6", "--skip-main", "1200-1202", "--skip-side", "1050"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        frames, ledger = cap.collect()
        out, err = emitter.communicate(timeout=60)
    finally:
        emitter.kill()
    assert emitter.returncode == 0, err
    assert json.loads(out)["tcp_cuts"] == 2
    assert [f.posture_index for f in frames] == list(range(1000, 1400))
    assert ledger["source_unique_frames"] == 400 and ledger["source_missing_indices"] == 0
    main = ledger["paths"][str(axis_port)]
    side = ledger["paths"][str(cap.ports[0])]
    assert main["role"] == "main" and main["source_missing_ranges"] == [[1200, 1202]]
    assert side["source_missing_ranges"] == [[1050, 1050]]
    assert ledger["tcp"]["connects"] == 3 and ledger["tcp"]["disconnects"] >= 2
    assert ledger["rejected_by_reason"].get("truncated", 0) >= 2  # the two cut datagrams
