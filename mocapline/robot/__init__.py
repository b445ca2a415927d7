"""The robot model: the Unitree G1 (29 DoF) MuJoCo model, its joint table and limits."""
