"""Small ONNX policies built in the tests (the onnx package's helper): a linear map of the
observation, so what the runner fed can be read back from what it returned. No third-party weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def linear_policy(path: Path, weight: np.ndarray, bias: np.ndarray | None = None,
                  batch: str | int = "batch_size") -> Path:
    """``output = input @ weight + bias`` with input [batch, W] and output [batch, A] (float32)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width, actions = weight.shape
    b = np.zeros(actions, dtype=np.float32) if bias is None else bias.astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["xw"]), helper.make_node("Add", ["xw", "B"], ["output"])],
        "linear_policy",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, actions])],
        [numpy_helper.from_array(weight.astype(np.float32), "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def constant_policy(path: Path, width: int, action: np.ndarray) -> Path:
    """A policy that ignores its observation and always answers ``action``."""
    return linear_policy(path, np.zeros((width, len(action))), action)
