// petra: parallel end-to-end training of reversible networks. The umbrella
// header: include it to get the whole library (CMake target petra::petra;
// without exceptions, all but the data floor and checkpoint files, see
// error.hpp). petra/core.hpp is the part that needs neither xtensor nor zlib
// (petra::core); petra/data.hpp and petra/xtensor.hpp need both (petra::data).
#pragma once

#include <petra/core.hpp>
#include <petra/error.hpp>
#if PETRA_EXCEPTIONS
#include <petra/data.hpp> // reports with exceptions only (error.hpp)
#endif
#include <petra/xtensor.hpp>
