"""Where the shipped data lives: ``assets/`` in a checkout, the package ``mocapline.assets`` when
installed (setup.py maps one onto the other, so both spellings name the same files)."""

from __future__ import annotations

from pathlib import Path

import mocapline.assets

ASSETS_DIR = Path(mocapline.assets.__file__).resolve().parent
IK_CONFIG_DIR = ASSETS_DIR / "ik_configs"
SKELETON_DIR = ASSETS_DIR / "skeletons"
DEMO_TAKE = ASSETS_DIR / "demo" / "walk_60hz.mlrec"
