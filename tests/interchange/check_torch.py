"""PyTorch both ways (ctest torch_interchange, label 'interchange'): petra's
reference_network<> and reversible_reference_network<> and their PyTorch
twins (bench/peer/networks.py) exchange trained weights through .npz files
(scripts/torch_weights, load_npz and save_npz) and must then compute the
same logits on real Fashion-MNIST test images.

For each network:
  names:          petra's named arrays (torch_interchange names) are the
                  state_dict's keys and shapes, in order, less batch norm's
                  num_batches_tracked;
  PyTorch->petra: the PyTorch model trains a few SGD steps in train mode
                  (weights and running statistics move), its state_dict goes
                  through `torch_weights to-npz` into petra's predict; petra's
                  logits match PyTorch's eval-mode logits on the same images;
  petra->PyTorch: petra trains a few steps of exact backprop
                  (torch_interchange train) and save_npz's its weights, which
                  `torch_weights from-npz --network` turns into a state_dict
                  loaded with strict=True; PyTorch's eval-mode logits match
                  petra's;
  refusals:       weights of the other network, and the network's own with
                  an array reshaped, missing or added, are refused by
                  petra's load_npz and by the converter, each with one
                  sentence naming the array, and nothing is written.
  example:        with --imported-weights, the example program
                  examples/imported_weights scores PyTorch's weights (the
                  converted file) on the first test images, as PyTorch's
                  eval-mode logits score them: the same accuracy.
Match: max |petra - torch| / max |torch| <= 1e-5. Also checks that petra
normalises the images as this script does (within 1e-6), and that
torch.nn.functional.pixel_unshuffle orders channels as petra's
pixel_unshuffle block does (4 c + 2 dy + dx).

Runs in a temporary directory. Exit status 77 (skipped) when torch or numpy
cannot be imported or the data set is not installed.
"""
import argparse
import gzip
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
SKIPPED = 77
TOLERANCE = 1e-5
MEAN, DEVIATION = 0.2860, 0.3530  # petra's fashion_mnist_normalisation (data/dataset.hpp)
COUNT = 64          # test images compared
STEPS = 4           # training steps on each side
BATCH = 32


def skip(reason):
    print(f"skipped: {reason}")
    sys.exit(SKIPPED)


try:
    import numpy as np
    import torch
    from torch.nn import functional
except ImportError as error:
    skip(f"{sys.executable} cannot import {error.name} (Debian's python3-torch and python3-numpy)")


class Failure(Exception):
    pass


def run(command, expect_success=True):
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True)
    if expect_success and result.returncode != 0:
        raise Failure(f"{' '.join(map(str, command))} exited with {result.returncode}:\n{result.stderr}")
    return result


def read_idx(path, header_bytes):
    with gzip.open(path, "rb") as handle:
        return np.frombuffer(handle.read(), dtype=np.uint8, offset=header_bytes)


def test_images(data_dir):
    images = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)[:COUNT]
    labels = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"), 8)[:COUNT]
    normalised = (images.astype(np.float32) / 255.0 - MEAN) / DEVIATION
    return torch.from_numpy(normalised.astype(np.float32)), torch.from_numpy(labels.astype(np.int64))


def relative_difference(petra_logits, torch_logits):
    petra_logits = np.asarray(petra_logits, dtype=np.float64)
    torch_logits = np.asarray(torch_logits, dtype=np.float64)
    if petra_logits.shape != torch_logits.shape:
        raise Failure(f"logits of shape {petra_logits.shape} from petra, {torch_logits.shape} from PyTorch")
    scale = np.max(np.abs(torch_logits))
    if not scale > 0:
        raise Failure("PyTorch's logits are all zero: nothing to compare")
    return float(np.max(np.abs(petra_logits - torch_logits)) / scale)


def eval_logits(model, images):
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))).numpy()


def read_predictions(path, images):
    with np.load(path) as archive:
        petra_images, logits = archive["images"], archive["logits"]
    # petra's normalisation is this script's (x * factor + offset against
    # (x / 255 - mean) / deviation: a rounding apart).
    difference = float(np.max(np.abs(petra_images - images.numpy())))
    if difference > 1e-6:
        raise Failure(f"petra's normalised images differ from PyTorch's by up to {difference}")
    return petra_images, logits


def check_names(program, name, model):
    listed = run([program, "names", name]).stdout.split("\n")
    petra_arrays = []
    for line in filter(None, listed):
        key, shape = line.split(" ")
        petra_arrays.append((key, tuple(int(extent) for extent in shape.split(","))))
    torch_arrays = [(key, tuple(value.shape)) for key, value in model.state_dict().items()
                    if not key.endswith(".num_batches_tracked")]
    if petra_arrays != torch_arrays:
        only_petra = sorted(set(petra_arrays) - set(torch_arrays))[:5]
        only_torch = sorted(set(torch_arrays) - set(petra_arrays))[:5]
        raise Failure(f"{name}: petra's arrays are not the state_dict's: petra only {only_petra}, "
                      f"PyTorch only {only_torch} (or another order)")
    parameter_count = sum(value.numel() for value in model.parameters())
    print(f"{name}: {len(petra_arrays)} named arrays, {parameter_count} parameters, same names and shapes")


def moved_statistics(state, what):
    # Training must have moved every running statistic from its start
    # (mean 0, variance 1); otherwise the comparison would not see a
    # misplaced statistic.
    for key, value in state.items():
        value = np.asarray(value)
        if key.endswith(".running_mean") and not np.any(value != 0):
            raise Failure(f"{what}: {key} is still all zero after training")
        if key.endswith(".running_var") and not np.any(value != 1):
            raise Failure(f"{what}: {key} is still all one after training")


def torch_to_petra(arguments, name, make, images, labels, work):
    torch.manual_seed(2)
    model = make()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    for step in range(STEPS):
        first = (step * BATCH) % (COUNT - BATCH + 1)
        optimizer.zero_grad()
        loss = functional.cross_entropy(model(images[first:first + BATCH]), labels[first:first + BATCH])
        loss.backward()
        optimizer.step()
    moved_statistics(model.state_dict(), f"{name}, PyTorch")
    state_path = os.path.join(work, f"{name}_torch.pt")
    weights = os.path.join(work, f"{name}_torch.npz")
    predictions = os.path.join(work, f"{name}_petra_predictions.npz")
    torch.save(model.state_dict(), state_path)
    run([sys.executable, arguments.torch_weights, "to-npz", state_path, weights])
    run([arguments.program, "predict", name, weights, arguments.data_dir, COUNT, predictions])
    petra_images, petra_logits = read_predictions(predictions, images)
    difference = relative_difference(petra_logits, eval_logits(model, petra_images))
    print(f"{name}: PyTorch -> petra: max |petra - torch| / max |torch| = {difference:.3g}")
    if not difference <= TOLERANCE:
        raise Failure(f"{name}: petra's logits with PyTorch's weights differ by {difference:.3g} (relative), "
                      f"over {TOLERANCE}")
    if arguments.imported_weights:
        check_example(arguments, name, weights, eval_logits(model, petra_images), labels)
    return weights


def check_example(arguments, name, weights, torch_logits, labels):
    """The example program's accuracy on PyTorch's weights is PyTorch's."""
    printed = run([arguments.imported_weights, weights, "--network", name, "--data-dir", arguments.data_dir,
                   "--count", COUNT]).stdout.strip()
    correct = int(np.sum(np.argmax(torch_logits, axis=1) == labels.numpy()))
    expected = f"test accuracy {100.0 * correct / COUNT:.2f}% on {COUNT} images"
    if expected not in printed:
        raise Failure(f"{name}: imported_weights printed {printed!r}; PyTorch scores its weights {expected!r}")
    print(f"{name}: imported_weights: {printed}")


def petra_to_torch(arguments, name, make, images, work):
    weights = os.path.join(work, f"{name}_petra.npz")
    predictions = os.path.join(work, f"{name}_petra_trained_predictions.npz")
    state_path = os.path.join(work, f"{name}_petra.pt")
    run([arguments.program, "train", name, arguments.data_dir, COUNT, STEPS, weights, predictions])
    with np.load(weights) as archive:
        moved_statistics({key: archive[key] for key in archive.files}, f"{name}, petra")
    run([sys.executable, arguments.torch_weights, "from-npz", weights, state_path, "--network", name])
    model = make()
    model.load_state_dict(torch.load(state_path), strict=True)
    petra_images, petra_logits = read_predictions(predictions, images)
    difference = relative_difference(petra_logits, eval_logits(model, petra_images))
    print(f"{name}: petra -> PyTorch: max |petra - torch| / max |torch| = {difference:.3g}")
    if not difference <= TOLERANCE:
        raise Failure(f"{name}: PyTorch's logits with petra's weights differ by {difference:.3g} (relative), "
                      f"over {TOLERANCE}")


def refused(arguments, name, weights, what, work, named=None):
    """Both petra's load_npz and the converter refuse `weights` for the
    network `name` with one sentence (naming the array `named`, if given)
    and write nothing."""
    predictions = os.path.join(work, "refused.npz")
    petra = run([arguments.program, "predict", name, weights, arguments.data_dir, COUNT, predictions],
                expect_success=False)
    state_path = os.path.join(work, "refused.pt")
    converter = run([sys.executable, arguments.torch_weights, "from-npz", weights, state_path, "--network", name],
                    expect_success=False)
    for side, result, output in (("petra", petra, predictions), ("torch_weights", converter, state_path)):
        message = result.stderr.strip()
        if result.returncode != 1 or not message or "\n" in message or (named and f"{named}" not in message):
            raise Failure(f"{side} did not refuse {what} for {name} in one sentence"
                          f"{' naming ' + named if named else ''} (status {result.returncode}: {message!r})")
        if os.path.exists(output):
            raise Failure(f"{side} refused {what} for {name} but wrote {output}")
    print(f"{name}: {what} refused: {petra.stderr.strip()} | {converter.stderr.strip()}")


def check_refusals(arguments, name, weights, other_weights, work):
    """Weights of the other network, and this network's with an array
    reshaped, missing or added, are refused."""
    with np.load(weights) as archive:
        arrays = {key: archive[key] for key in archive.files}
    dense = [key for key, array in arrays.items() if array.ndim == 2][-1]
    statistic = sorted(key for key in arrays if key.endswith(".running_var"))[0]
    extra = "blocks.0.f.7.weight"
    cases = [
        ("reshaped", dict(arrays, **{dense: np.ascontiguousarray(arrays[dense].T)}), dense),
        ("missing", {key: array for key, array in arrays.items() if key != statistic}, statistic),
        ("extra", dict(arrays, **{extra: np.zeros((1, 1, 3, 3), np.float32)}), extra),
    ]
    refused(arguments, name, other_weights, "the other network's weights", work)
    for what, changed, named in cases:
        path = os.path.join(work, f"{name}_{what}.npz")
        np.savez(path, **changed)
        refused(arguments, name, path, f"weights with an array {what}", work, named)


def check_pixel_unshuffle():
    # petra's pixel_unshuffle: y[4 c + 2 dy + dx][i][j] = x[c][2 i + dy][2 j + dx].
    x = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).reshape(2, 3, 4, 6)
    expected = torch.empty(2, 12, 2, 3)
    for c in range(3):
        for dy in range(2):
            for dx in range(2):
                expected[:, 4 * c + 2 * dy + dx] = x[:, c, dy::2, dx::2]
    if not torch.equal(functional.pixel_unshuffle(x, 2), expected):
        raise Failure("torch.nn.functional.pixel_unshuffle does not order channels as petra's pixel_unshuffle")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", required=True, help="the torch_interchange executable")
    parser.add_argument("--source", required=True, help="petra's source tree")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--imported-weights", help="the imported_weights example, checked on PyTorch's weights")
    arguments = parser.parse_args()
    arguments.torch_weights = os.path.join(arguments.source, "scripts", "torch_weights")
    if not os.path.exists(os.path.join(arguments.data_dir, "t10k-images-idx3-ubyte.gz")):
        skip(f"{arguments.data_dir} has no Fashion-MNIST (the dataset-fashion-mnist package)")
    sys.path.insert(0, os.path.join(arguments.source, "bench", "peer"))
    from networks import NETWORKS

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    images, labels = test_images(arguments.data_dir)
    try:
        check_pixel_unshuffle()
        with tempfile.TemporaryDirectory(prefix="petra_torch_") as work:
            from_torch = {}
            for name, make in NETWORKS.items():
                check_names(arguments.program, name, make())
                from_torch[name] = torch_to_petra(arguments, name, make, images, labels, work)
                petra_to_torch(arguments, name, make, images, work)
            for name, other in (("reference", "reversible"), ("reversible", "reference")):
                check_refusals(arguments, name, from_torch[name], from_torch[other], work)
    except Failure as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    print("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
