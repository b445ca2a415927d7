"""`mocapline bench load` starts `up --demo` with flags of its own: they must be today's `up`'s
(the retarget -> streamer link's flag was renamed by issue 34 and every run said "did not start")."""

from __future__ import annotations

from pathlib import Path

from mocapline.bench.load import up_command
from mocapline.tools.pipeline.up import build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_the_harness_starts_up_with_flags_up_takes(tmp_path) -> None:
    argv = up_command(tmp_path, ROOT)
    assert argv[1:4] == ["-m", "mocapline.cli", "up"]
    args = build_parser().parse_args(argv[4:])
    assert args.demo and args.log_dir == tmp_path
    ports = [args.main_port, args.side_port, args.output_port, args.human_port, args.retarget_port, args.web_port]
    assert len(set(ports)) == len(ports) and 5557 not in ports and 5555 not in ports


def test_an_older_tree_gets_its_own_name_for_the_link(tmp_path) -> None:
    old = tmp_path / "old"
    (old / "mocapline" / "tools" / "pipeline").mkdir(parents=True)
    (old / "mocapline" / "tools" / "pipeline" / "up.py").write_text('p.add_argument("--robot-port")\n')
    assert "--robot-port" in up_command(tmp_path, old) and "--retarget-port" not in up_command(tmp_path, old)
