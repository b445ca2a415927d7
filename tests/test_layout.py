"""The package's shape: one top-level package, and imports that point one way.

Layers, lowest first: core, formats, robot, services, tools, bench; ``mocapline.cli`` and the
``mocapline`` package itself sit above them all. A module may import its own layer or a lower one;
a service may not import another service (they talk over links, not imports), and nothing below
the tools imports a tool.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mocapline"
LAYERS = ("core", "formats", "robot", "services", "tools", "bench")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every mocapline module a file imports, at top level or inside a function."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("mocapline"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _module_name(path).split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            if module.startswith("mocapline"):
                out.add(module)
    return out


def _place(module: str) -> tuple[int, str]:
    """(layer rank, unit): the unit is the service or tool folder a module belongs to."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        if module in ("mocapline.assets",):
            return (0, "assets")
        if module == "mocapline.client":  # the consumer library: public at the top, built on core alone
            return (0, "core")
        return (len(LAYERS), "top")
    rank = LAYERS.index(parts[1])
    unit = ".".join(parts[1:3]) if parts[1] in ("services", "tools") and len(parts) > 2 else parts[1]
    return (rank, unit)


def _violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "pb" in path.relative_to(PACKAGE).parts:
            continue
        here = _module_name(path)
        rank, unit = _place(here)
        for imported in sorted(_imports(path)):
            their_rank, their_unit = _place(imported)
            if their_rank > rank:
                found.append(f"{here} imports {imported} (a higher layer)")
            elif unit.startswith("services.") and their_unit.startswith("services.") and their_unit != unit:
                found.append(f"{here} imports {imported} (another service)")
    return found


def test_imports_point_one_way() -> None:
    assert _violations() == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    """The layer rule itself: an import upward is caught, one downward is not."""
    assert _place("mocapline.tools.emitter.emitter") > _place("mocapline.services.capture.core")
    assert _place("mocapline.core.header")[0] < _place("mocapline.formats.axis_bvh")[0]
    assert _place("mocapline.services.capture.core")[1] != _place("mocapline.services.retarget.config")[1]


def _robot_facts(path: Path, names: set[str]) -> list[str]:
    """Where a module names a robot's joint (a string equal to one of ``names``) or the G1's joint
    count (the integer 29)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"{path.name}:{node.lineno} names the joint {node.value!r}")
        elif isinstance(node, ast.Constant) and type(node.value) is int and node.value == 29:
            found.append(f"{path.name}:{node.lineno} has the G1's joint count 29")
    return found


# Bone numbers of Noitom's published skeletons (index 29 is a finger bone), not a joint count.
NOT_A_ROBOT = ("mocapline/formats/skeleton.py",)


def test_only_the_robot_package_knows_a_robot() -> None:
    """A robot is data (mocapline/robot/builds): no module elsewhere names one of its joints or the
    G1's joint count; each asks the description."""
    from mocapline.robot.registry import get_robot, robot_names

    # joint names of one word (the H1's "torso") are everyday words too (`--support torso`)
    names = {j for r in robot_names() for j in get_robot(r).joint_names if "_" in j}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).parts
        if rel[0] == "robot" or "pb" in rel or str(path.relative_to(ROOT)) in NOT_A_ROBOT:
            continue
        found += _robot_facts(path, names)
    assert found == []


def test_the_robot_check_sees_a_joint_name_and_the_count(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('JOINT = "left_knee_joint"\nN = 29\nOK = "left_knee"\nFLOAT = 29.0\n')
    found = _robot_facts(module, {"left_knee_joint"})
    assert len(found) == 2 and "left_knee_joint" in found[0] and "29" in found[1]


@pytest.mark.integration
def test_wheel_holds_one_top_level_package(tmp_path: Path) -> None:
    """`pip install .` must not put `services`, `bench` or `tests` into site-packages."""
    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ behind
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", "tests"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(source)],
        check=True,
    )
    (wheel,) = tmp_path.glob("mocapline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"mocapline"}
    for needed in ("mocapline/assets/demo/walk_60hz.mlrec", "mocapline/assets/ik_configs/axis_studio_to_g1.json",
                   "mocapline/core/pb/mocap_pb2.py", "mocapline/services/capture/service.py",
                   "mocapline/robot/builds/g1.toml", "mocapline/robot/builds/h1.toml",
                   "mocapline/assets/skeletons/cmu.json"):
        assert needed in names, needed
