"""What rounding Winograd's products to bf16 would cost in accuracy.

petra's 3x3 stride-1 convolutions over 8 channels or more take Winograd's
form in float (include/petra/kernels/winograd.hpp): F(4x4, 3x3) for the
forward pass and the input gradient on the reference network's 28x28, 14x14
and 7x7 images (winograd_output_tile), F(2x2, 3x3) for the weight gradient.
Under --precision bf16 the direct bf16 kernels (convolution_bf16.hpp) round
the input and the weights to bf16 and sum in float. A bf16 Winograd form
would round the transformed patches V = B^T d B and the transformed weights
U = G g G^T instead, and multiply those on vdpbf16ps or AMX; the output
transform A^T M A then adds the rounding errors of up to 36 products with
coefficients up to 8 x 8.

For one 4x4 (F(2x2)) or 6x6 (F(4x4)) patch per sample, in double, this
prints the relative RMS error of each form's results against the exact
correlation: the direct form on bf16-rounded operands (what petra's bf16
kernels compute), each Winograd form with V and U in float and in bf16, and
with V alone in bf16. Inputs: after a ReLU (a forward pass's) or signed (an
input gradient's); weights He-scaled.

    /usr/bin/python3 bench/winograd_bf16_rounding.py [--samples N] [--seed S]

Needs numpy (Debian's python3-numpy).
"""
import argparse

import numpy as np

# F(2x2, 3x3) and F(4x4, 3x3): B^T, G, A^T as winograd.hpp writes them.
FORMS = {
    "F(2x2, 3x3)": (
        np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float),
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], float),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float),
    ),
    "F(4x4, 3x3)": (
        np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], float),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], float),
    ),
}


def to_bf16(values):
    """Rounded to the nearest bf16, ties to even (kernels/bf16.hpp's round_to_bf16)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def to_float(values):
    return np.asarray(values, dtype=np.float32).astype(np.float64)


def relative_rms(approximate, exact):
    return float(np.sqrt(np.mean((approximate - exact) ** 2) / np.mean(exact ** 2)))


def direct(patches, weights, side):
    """The 3x3 correlation's side x side results of each patch."""
    out = np.zeros(patches.shape[:1] + weights.shape[:1] + (side, side))
    for i in range(side):
        for j in range(side):
            out[:, :, i, j] = np.einsum("ncab,kcab->nk", patches[:, :, i:i + 3, j:j + 3], weights)
    return out


def winograd(patches, weights, form, round_patches, round_weights):
    bt, g, at = FORMS[form]
    v = round_patches(np.einsum("ab,ncbe,fe->ncaf", bt, patches, bt))
    u = round_weights(np.einsum("ab,kcbe,fe->kcaf", g, weights, g))
    m = np.einsum("ncaf,kcaf->nkaf", v, u)
    return np.einsum("ab,nkbe,fe->nkaf", at, m, at)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=400, help="patches per case (default 400)")
    parser.add_argument("--seed", type=int, default=1)
    arguments = parser.parse_args()
    if arguments.samples < 1:
        parser.error("--samples must be positive")
    rng = np.random.default_rng(arguments.seed)
    columns = ["direct, bf16 operands"]
    for form in FORMS:
        columns += [f"{form}, float", f"{form}, bf16 V and U", f"{form}, bf16 V"]
    print("| channels in x out | input | " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    for channels in (16, 32, 64):
        for signed in (False, True):
            direct_errors = []
            cells = []
            for form, (bt, _, at) in FORMS.items():
                side = at.shape[0]
                patches = rng.standard_normal((arguments.samples, channels, bt.shape[0], bt.shape[0]))
                if not signed:
                    patches = np.maximum(patches, 0.0)
                weights = rng.standard_normal((channels, channels, 3, 3)) * np.sqrt(2.0 / (9 * channels))
                exact = direct(patches, weights, side)
                direct_errors.append(relative_rms(direct(to_bf16(patches), to_bf16(weights), side), exact))
                for round_v, round_u in ((to_float, to_float), (to_bf16, to_bf16), (to_bf16, to_float)):
                    cells.append(relative_rms(winograd(patches, weights, form, round_v, round_u), exact))
            kind = "signed (input gradient)" if signed else "after a ReLU (forward)"
            row = [np.mean(direct_errors)] + cells
            print(f"| {channels} x {channels} | {kind} | " + " | ".join(f"{e:.2e}" for e in row) + " |")

if __name__ == "__main__":
    main()
