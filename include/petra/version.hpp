// The library's version, matching the CMake project version.
#pragma once

#define PETRA_VERSION_MAJOR 0
#define PETRA_VERSION_MINOR 2
#define PETRA_VERSION_PATCH 0
#define PETRA_VERSION_STRING "0.2.0"
