"""petra's two reference networks in PyTorch, module for module, so that a
model's state_dict keys are petra's array names (include/petra/
parameter_names.hpp): blocks.<i>.<part>.<j>.<array>, with i the block's
index, part f or g, j the layer's index in the block's chain as petra's type
list writes it (ReLU and pooling counted), and PyTorch's array names
(convolution weight [O, I, K, K]; batch norm weight = gamma, bias = beta,
running_mean, running_var; Linear weight [O, I] and bias). The only keys
petra does not have are batch norm's num_batches_tracked.

    reference_network()             include/petra/models/reference_network.hpp
                                    (222,058 parameters with the defaults)
    reversible_reference_network()  include/petra/models/
                                    reversible_reference_network.hpp
                                    (201,578 parameters with the defaults)

Each block takes and gives a pair of halves (x, x~), as petra's blocks do:
  Stem:           (F(image)[:, :C], F(image)[:, C:])
  Coupling:       y = x~ + F(x), y~ = x
  Downsampling:   y = F(x), y~ = y + G(x~)
  PixelUnshuffle: each half space to depth, channel 4 c + 2 dy + dx
  Head:           F(concatenation of the halves along the channels)
Batch norm as petra's: momentum 0.1, epsilon 1e-5 (PyTorch's defaults).
"""
import torch
from torch import nn
from torch.nn import functional

BATCH_NORM_MOMENTUM, BATCH_NORM_EPSILON = 0.1, 1e-5


def conv(cin, cout, kernel, stride=1):
    # No bias, as in petra: the batch norm after each convolution makes one
    # redundant (PyTorch's default bias=True would add 672 parameters to the
    # reference network).
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


def batch_norm(channels):
    return nn.BatchNorm2d(channels, eps=BATCH_NORM_EPSILON, momentum=BATCH_NORM_MOMENTUM)


class GlobalAveragePool(nn.Module):
    """petra's global_average_pool: the mean over height and width, N x C."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


class Stem(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, image):
        value = self.f(image)
        half = value.shape[1] // 2
        return value[:, :half], value[:, half:]


class Coupling(nn.Module):
    """petra's additive_coupling: y = x~ + F(x), y~ = x."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, halves):
        x, x_tilde = halves
        return x_tilde + self.f(x), x


class Downsampling(nn.Module):
    """petra's downsample: y = F(x), y~ = y + G(x~)."""

    def __init__(self, f, g):
        super().__init__()
        self.f = f
        self.g = g

    def forward(self, halves):
        x, x_tilde = halves
        y = self.f(x)
        return y, y + self.g(x_tilde)


class PixelUnshuffle(nn.Module):
    """petra's pixel_unshuffle block: each half's 2 x 2 neighbourhoods become
    channels, y[4 c + 2 dy + dx][i][j] = x[c][2 i + dy][2 j + dx], which is
    torch.nn.functional.pixel_unshuffle's order. No parameters."""

    def forward(self, halves):
        return tuple(functional.pixel_unshuffle(half, 2) for half in halves)


class Head(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, halves):
        return self.f(torch.cat(halves, dim=1))


class Network(nn.Module):
    """A chain of blocks: state_dict keys blocks.<i>.<part>.<j>.<array>."""

    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.Sequential(*blocks)

    def forward(self, images):
        return self.blocks(images)


def residual_function(channels, inner=None):
    # petra's residual_function<C> (inner = C) and
    # narrowing_residual_function<C, Inner>.
    inner = channels if inner is None else inner
    return nn.Sequential(conv(channels, inner, 3), batch_norm(inner), nn.ReLU(),
                         conv(inner, channels, 3), batch_norm(channels), nn.ReLU())


def stem(width):
    return Stem(nn.Sequential(conv(1, 2 * width, 3), batch_norm(2 * width), nn.ReLU()))


def downsampling(channels):
    # petra's downsampling<C>: F = conv3x3 stride 2, BN, ReLU; G = conv1x1
    # stride 2 (no padding), BN.
    out = 2 * channels
    return Downsampling(nn.Sequential(conv(channels, out, 3, 2), batch_norm(out), nn.ReLU()),
                        nn.Sequential(conv(channels, out, 1, 2), batch_norm(out)))


def reference_network(width=16, blocks_per_resolution=2, classes=10):
    """petra's reference_network<Width, BlocksPerResolution, Classes>."""
    blocks = [stem(width)]
    for resolution in range(3):
        channels = width << resolution
        if resolution > 0:
            blocks.append(downsampling(channels // 2))
        blocks += [Coupling(residual_function(channels)) for _ in range(blocks_per_resolution)]
    blocks.append(Head(nn.Sequential(GlobalAveragePool(), nn.Linear(8 * width, classes))))
    return Network(blocks)


def reversible_reference_network(width=16, blocks_per_resolution=2, classes=10):
    """petra's reversible_reference_network<Width, BlocksPerResolution,
    Classes>: pixel_unshuffle between resolutions, couplings at 14 x 14 and
    7 x 7 that narrow to `width` channels inside, a head with batch norm and
    ReLU before the pooling."""
    blocks = [stem(width)]
    blocks += [Coupling(residual_function(width)) for _ in range(blocks_per_resolution)]
    for channels in (4 * width, 16 * width):
        blocks.append(PixelUnshuffle())
        blocks += [Coupling(residual_function(channels, width)) for _ in range(blocks_per_resolution)]
    channels = 32 * width
    blocks.append(Head(nn.Sequential(batch_norm(channels), nn.ReLU(), GlobalAveragePool(),
                                     nn.Linear(channels, classes))))
    return Network(blocks)


# By the name scripts/torch_weights --network takes.
NETWORKS = {"reference": reference_network, "reversible": reversible_reference_network}
