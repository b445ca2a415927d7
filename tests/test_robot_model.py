"""The G1 model: packaged Menagerie reference, mesh-free IK variant with sites, same kinematics."""

import g1_facts as rm
import mujoco
import numpy as np
import pytest

from mocapline.services.retarget import synthetic


@pytest.fixture(scope="module")
def reference() -> mujoco.MjModel:
    return rm.load_reference_model()


@pytest.fixture(scope="module")
def ik_model() -> mujoco.MjModel:
    return rm.load_ik_model()


def test_reference_comes_from_the_package_with_its_license() -> None:
    d = rm.model_dir()
    assert (d / "g1.xml").is_file()
    assert "Redistribution and use in source and binary forms" in (d / "LICENSE").read_text()
    assert (d / "assets").is_dir()


def test_joint_order_is_the_model_order(reference: mujoco.MjModel, ik_model: mujoco.MjModel) -> None:
    for model in (reference, ik_model):
        assert model.nq == 7 + rm.N_JOINTS == 36
        assert model.nv == 6 + rm.N_JOINTS == 35
        assert model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
        assert rm.joint_names(model) == rm.G1_JOINT_NAMES
        # qpos[7 + i] is joint i
        for i, name in enumerate(rm.G1_JOINT_NAMES):
            assert model.jnt_qposadr[model.joint(name).id] == 7 + i
    assert set(rm.G1_VELOCITY_LIMITS) == set(rm.G1_JOINT_NAMES)


def test_ik_variant_is_mesh_free_and_has_the_ik_sites(reference: mujoco.MjModel, ik_model: mujoco.MjModel) -> None:
    assert reference.nmesh > 0 and reference.ngeom > 0
    assert ik_model.nmesh == 0 and ik_model.ngeom == 0
    assert rm.body_names(ik_model) == rm.body_names(reference)
    for name, site_def in rm.IK_SITES.items():
        site = ik_model.site(name)
        assert ik_model.body(site.bodyid[0]).name == site_def.body
        np.testing.assert_allclose(site.pos, site_def.pos)
    # the sites of the reference survive too
    for name in rm.site_names(reference):
        assert name in rm.site_names(ik_model)


@pytest.mark.parametrize("seed", [0, 1])
def test_ik_model_forward_kinematics_equal_the_reference(reference, ik_model, seed: int) -> None:
    rng = np.random.default_rng(seed)
    poses = synthetic.random_poses(25, rng, model=ik_model, spread=1.0)
    d_ref, d_ik = mujoco.MjData(reference), mujoco.MjData(ik_model)
    names = rm.body_names(reference)
    ref_ids = [reference.body(n).id for n in names]
    ik_ids = [ik_model.body(n).id for n in names]
    ref_sites = rm.site_names(reference)
    for q in poses:
        d_ref.qpos[:] = q
        d_ik.qpos[:] = q
        mujoco.mj_kinematics(reference, d_ref)
        mujoco.mj_kinematics(ik_model, d_ik)
        np.testing.assert_allclose(d_ik.xpos[ik_ids], d_ref.xpos[ref_ids], atol=1e-12)
        np.testing.assert_allclose(d_ik.xquat[ik_ids], d_ref.xquat[ref_ids], atol=1e-12)
        for s in ref_sites:
            np.testing.assert_allclose(d_ik.site_xpos[ik_model.site(s).id], d_ref.site_xpos[reference.site(s).id],
                                       atol=1e-12)
        # added sites sit at their declared place on their body
        for name, site_def in rm.IK_SITES.items():
            b = ik_model.body(site_def.body).id
            expected = d_ik.xpos[b] + d_ik.xmat[b].reshape(3, 3) @ np.array(site_def.pos)
            np.testing.assert_allclose(d_ik.site_xpos[ik_model.site(name).id], expected, atol=1e-12)


def test_full_model_keeps_meshes_and_gets_the_sites(reference: mujoco.MjModel) -> None:
    full = rm.load_full_model()
    assert full.nmesh == reference.nmesh
    assert all(name in rm.site_names(full) for name in rm.IK_SITES)
    scene = rm.load_full_model(scene=True)
    assert scene.ngeom > full.ngeom  # the floor
    assert rm.joint_names(scene) == rm.G1_JOINT_NAMES


def test_default_pose_stands_on_the_ground(ik_model: mujoco.MjModel) -> None:
    d = mujoco.MjData(ik_model)
    d.qpos[:] = rm.default_qpos(ik_model)
    mujoco.mj_kinematics(ik_model, d)
    for side in ("left", "right"):
        sole = d.site_xpos[ik_model.site(f"{side}_sole").id]
        assert abs(sole[2]) < 0.005
    ranges = rm.joint_ranges(ik_model)
    assert ranges.shape == (29, 2) and np.all(ranges[:, 0] < 0) and np.all(ranges[:, 1] > 0)
