// Every block (floor 4): the units a network is a list of.
#pragma once

#include <petra/blocks/additive_coupling.hpp>
#include <petra/blocks/block.hpp>
#include <petra/blocks/downsample.hpp>
#include <petra/blocks/head.hpp>
#include <petra/blocks/pixel_unshuffle.hpp>
#include <petra/blocks/revnet_coupling.hpp>
#include <petra/blocks/stem.hpp>
