"""The `mocapline` command and `python3 -m mocapline` are one."""

from __future__ import annotations

import subprocess
import sys


def test_python_m_mocapline_is_the_mocapline_command() -> None:
    as_module = subprocess.run([sys.executable, "-m", "mocapline", "--help"], capture_output=True, text=True,
                               timeout=60)
    as_cli = subprocess.run([sys.executable, "-m", "mocapline.cli", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert as_module.returncode == as_cli.returncode == 0
    assert as_module.stdout == as_cli.stdout and "retarget-file" in as_module.stdout
    bad = subprocess.run([sys.executable, "-m", "mocapline", "no-such-command"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "no-such-command" in bad.stderr + bad.stdout
