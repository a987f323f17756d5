"""The peer: petra's reference network trained with plain backprop in
Debian's python3-torch (1.13, CPU convolutions from oneDNN), for a side by
side throughput comparison with petra (scripts/peer runs both, interleaved).

Run with the system interpreter that has the package:
    /usr/bin/python3 bench/peer/reference_network.py --threads 1 --steps 150

The network is the one of include/petra/models/reference_network.hpp, block
for block (bench/peer/networks.py, whose state_dict keys are petra's array
names), on a state split into two halves (x, x~):
  stem:        conv3x3 1 -> 32, batch norm, ReLU, split into halves of 16;
  couplings:   y = x~ + F(x), y~ = x, F = conv3x3, BN, ReLU, conv3x3, BN,
               ReLU (2 at each of 28x28, 14x14, 7x7, width kept);
  downsample:  y = ReLU(BN(conv3x3 s2 (x))), y~ = y + BN(conv1x1 s2 (x~)),
               channels of both halves doubled (between resolutions);
  head:        halves concatenated, global average pool, dense 128 -> 10;
  loss:        softmax cross-entropy (mean over the batch).
Trained as petra's job trains it: SGD with Nesterov momentum 0.9, weight
decay 5e-4 on convolution and dense weights only (not on batch-norm
parameters or the dense bias), batch 64, images normalised with mean 0.2860
and deviation 0.3530, batches drawn from a shuffled order of the real
training set. The learning rate is constant (0.05): a schedule changes no
work per step.

With --precision bf16, each step's forward and loss run under
torch.autocast("cpu", dtype=torch.bfloat16) (the convolutions and the dense
layer in bf16, the parameters and the optimizer in float), as petra's
--precision bf16 keeps its parameters and optimizer in float.

Timing: `--warmup` steps (20) first, untimed (the allocator and oneDNN's
kernel selection settle), then `--steps` steps timed with a monotonic clock.
Prints one JSON line: threads, steps, seconds, examples_per_second,
parameter_count (must be petra's 222,058; the script fails otherwise) and
the loss of the last step.
"""
import argparse
import gzip
import json
import os
import sys
import time

# OpenBLAS (the peer's BLAS for its dense layers) uses one thread, like the
# comparison asks; set before the library loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

# The network itself, whose state_dict keys are petra's array names.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from networks import reference_network  # noqa: E402

PETRA_PARAMETER_COUNT = 222058
MEAN, DEVIATION = 0.2860, 0.3530


def read_idx(path, header_bytes):
    with gzip.open(path, "rb") as handle:
        return np.frombuffer(handle.read(), dtype=np.uint8, offset=header_bytes)


def load_training_set(directory):
    images = read_idx(os.path.join(directory, "train-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)
    labels = read_idx(os.path.join(directory, "train-labels-idx1-ubyte.gz"), 8)
    if len(images) != len(labels):
        sys.exit(f"{directory}: {len(images)} images but {len(labels)} labels")
    normalised = (images.astype(np.float32) / 255.0 - MEAN) / DEVIATION
    return torch.from_numpy(normalised), torch.from_numpy(labels.astype(np.int64))


def optimizer_for(model, learning_rate):
    # Weight decay on convolution and dense weights only, as petra's
    # net::weight_mask: the batch-norm scales and shifts and the dense bias
    # do not decay.
    decayed = [p for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear)) for p in [m.weight]]
    decayed_ids = {id(p) for p in decayed}
    others = [p for p in model.parameters() if id(p) not in decayed_ids]
    return torch.optim.SGD([{"params": decayed, "weight_decay": 5e-4}, {"params": others, "weight_decay": 0.0}],
                           lr=learning_rate, momentum=0.9, nesterov=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1)")
    parser.add_argument("--steps", type=int, default=150, help="timed training steps (150)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps before (20)")
    parser.add_argument("--batch", type=int, default=64, help="examples per step (64)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: forward and loss under CPU autocast to bfloat16 (fp32)")
    arguments = parser.parse_args()

    torch.set_num_threads(arguments.threads)
    torch.manual_seed(arguments.seed)
    images, labels = load_training_set(arguments.data_dir)
    model = reference_network()
    parameter_count = sum(p.numel() for p in model.parameters())
    if parameter_count != PETRA_PARAMETER_COUNT:
        sys.exit(f"the peer's network has {parameter_count} parameters, petra's {PETRA_PARAMETER_COUNT}: "
                 "not the same architecture")
    model.train()
    optimizer = optimizer_for(model, 0.05)
    loss_function = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(arguments.seed)
    order = torch.randperm(len(images), generator=generator)

    def step(index):
        start = (index * arguments.batch) % (len(order) - arguments.batch + 1)
        chosen = order[start:start + arguments.batch]
        optimizer.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=arguments.precision == "bf16"):
            loss = loss_function(model(images[chosen]), labels[chosen])
        loss.backward()
        optimizer.step()
        return loss

    for index in range(arguments.warmup):
        step(index)
    begin = time.perf_counter()
    for index in range(arguments.warmup, arguments.warmup + arguments.steps):
        loss = step(index)
    last_loss = float(loss)  # read inside the timed span: the step is done when its loss is known
    seconds = time.perf_counter() - begin
    print(json.dumps({
        "method": "peer", "peer": f"python3-torch {torch.__version__}", "threads": arguments.threads,
        "batch": arguments.batch, "warmup_steps": arguments.warmup, "steps": arguments.steps,
        "seconds": round(seconds, 3), "examples_per_second": round(arguments.steps * arguments.batch / seconds, 1),
        "parameter_count": parameter_count, "last_loss": round(last_loss, 4),
        "onednn": bool(torch.backends.mkldnn.is_available()), "precision": arguments.precision,
    }))


if __name__ == "__main__":
    main()
