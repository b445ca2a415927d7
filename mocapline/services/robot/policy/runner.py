"""An ONNX policy through onnxruntime (the ``[policy]`` extra), CPU, one thread: the bridge's
control loop is the caller and must not compete with a thread pool of its own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.services.robot.policy.description import PolicyDescription, PolicyDescriptionError


class PolicyRunner:
    """One inference session; ``__call__`` maps an observation to the raw action."""

    def __init__(self, path: str | Path, policy: PolicyDescription) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise PolicyDescriptionError("the policy controller needs onnxruntime: "
                                         "pip install -e '.[policy]'") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self.session: Any = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types for a bad file
            raise PolicyDescriptionError(f"{path}: not an ONNX model onnxruntime can load: {exc}") from None
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1:
            raise PolicyDescriptionError(f"{path}: the graph has {len(inputs)} inputs; a policy takes one")
        self.input = inputs[0].name
        self.output = outputs[0].name
        width, actions = inputs[0].shape[-1], outputs[0].shape[-1]
        if width != policy.width:
            raise PolicyDescriptionError(f"{policy.name}: the description's observation is {policy.width} wide, "
                                         f"the ONNX input of {Path(path).name} is {width} wide")
        if isinstance(actions, int) and actions != len(policy.joints):
            raise PolicyDescriptionError(f"{policy.name}: {len(policy.joints)} joints, the ONNX output of "
                                         f"{Path(path).name} has {actions}")
        self.last_s = 0.0

    def __call__(self, observation: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.session.run([self.output], {self.input: observation.reshape(1, -1).astype(np.float32)})[0]
        self.last_s = time.perf_counter() - t0
        return np.asarray(out, dtype=np.float64).reshape(-1)
