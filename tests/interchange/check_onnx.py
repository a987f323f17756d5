"""Checks petra's ONNX export against two other implementations of ONNX.

    check_onnx.py <onnx_export_cases program> <work directory> [<Fashion-MNIST directory>]

Runs the program, which writes each case (onnx_export_cases.cpp): a model,
images, petra's logits of them and the network's array names and shapes.
For every case:
  - onnx 1.12's checker, full_check=True (shape inference included), and
    the model's one opset import (the default domain, 13);
  - the initializers: every array petra names is one, with its shape;
  - OpenCV 4.6's dnn module reads the model and computes the logits of the
    images, in one batch and in a smaller one (the batch is symbolic); they
    must equal petra's: max |opencv - petra| / max |petra| <= 1e-4 over the
    whole batch of logits.
Exit code 77 (skipped) when numpy, onnx or cv2 cannot be imported, or when
the data set is absent, so that the reference networks were not written
(after the other cases were checked).
"""
import os
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
try:
    import numpy as np
    import onnx
    import cv2
except ImportError as missing:
    print(f"skipped: {missing}")
    sys.exit(77)

TOLERANCE = 1e-4
OPERATORS = {"Conv", "BatchNormalization", "Relu", "Add", "Split", "Concat", "Reshape", "Transpose",
             "GlobalAveragePool", "Flatten", "Gemm", "Identity"}
REFERENCE_CASES = {"reference_network", "reversible_reference_network"}


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def check_model(path, arrays):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    opsets = [(entry.domain, entry.version) for entry in model.opset_import]
    assert opsets == [("", 13)], f"{path}: opset imports {opsets}"
    operators = {node.op_type for node in model.graph.node}
    assert operators <= OPERATORS, f"{path}: operators outside the expected set: {operators - OPERATORS}"
    initializers = {tensor.name: list(tensor.dims) for tensor in model.graph.initializer}
    for name, shape in arrays.items():
        assert name in initializers, f"{path}: no initializer {name}"
        assert initializers[name] == shape, f"{path}: {name} has shape {initializers[name]}, petra's is {shape}"
    assert [i.name for i in model.graph.input] == ["images"], f"{path}: inputs {model.graph.input}"
    assert [o.name for o in model.graph.output] == ["logits"], f"{path}: outputs {model.graph.output}"
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch", f"{path}: the batch dimension is not symbolic: {batch}"


def opencv_logits(path, images):
    net = cv2.dnn.readNetFromONNX(path)
    net.setInput(images)
    return net.forward()


def check_case(directory, case):
    base = os.path.join(directory, case)
    arrays = {}
    with open(base + ".arrays.txt") as lines:
        for line in lines:
            name, *extents = line.split()
            arrays[name] = [int(extent) for extent in extents]
    check_model(base + ".onnx", arrays)
    images = np.load(base + ".images.npy")
    expected = np.load(base + ".logits.npy")
    assert images.dtype == np.float32 and expected.dtype == np.float32
    # Logits that do not depend on the image would hide a graph that ignores it.
    assert np.max(np.std(expected, axis=0)) > 1e-3, f"{case}: petra's logits barely vary over the images"
    errors = []
    for count in (len(images), 3):
        actual = opencv_logits(base + ".onnx", np.ascontiguousarray(images[:count]))
        assert actual.shape == expected[:count].shape, f"{case}: OpenCV gives {actual.shape}"
        errors.append(relative_error(actual, expected[:count]))
    error = max(errors)
    print(f"{case}: {len(arrays)} named arrays; OpenCV against petra, max |a - b| / max |b| = {error:.2e}"
          f" (batches of {len(images)} and 3)")
    assert error <= TOLERANCE, f"{case}: relative error {error:.3e} above {TOLERANCE}"


def main():
    program, directory = sys.argv[1], sys.argv[2]
    command = [program, directory] + sys.argv[3:4]
    subprocess.run(command, check=True)
    with open(os.path.join(directory, "cases.txt")) as lines:
        cases = [line.strip() for line in lines if line.strip()]
    for case in cases:
        check_case(directory, case)
    if not REFERENCE_CASES <= set(cases):
        print("skipped: the reference networks need the Fashion-MNIST data set")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
