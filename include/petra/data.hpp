// The data floor: IDX files, labelled image datasets, batches.
#pragma once

#include <petra/data/augmentation.hpp>
#include <petra/data/dataset.hpp>
#include <petra/data/dataset_source.hpp>
#include <petra/data/idx.hpp>
