// petra: parallel end-to-end training of reversible networks. The umbrella
// header: include it to get the whole library (CMake target petra::petra).
// petra/core.hpp is the part that needs neither xtensor nor zlib
// (petra::core); petra/data.hpp and petra/xtensor.hpp need both (petra::data).
#pragma once

#include <petra/core.hpp>
#include <petra/data.hpp>
#include <petra/xtensor.hpp>
