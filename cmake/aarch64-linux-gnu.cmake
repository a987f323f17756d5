# Cross build for 64-bit ARM Linux (xsimd's kernels then use NEON), with
# Debian's g++-aarch64-linux-gnu; the programs run on an x86-64 machine
# under qemu-user (Debian's qemu-user). scripts/test does:
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DPETRA_DATA=OFF -DPETRA_BUILD_BENCHMARKS=OFF
#   cmake --build build-aarch64 --target test_gemm ...
#   ctest --test-dir build-aarch64 -L portable     # each test under qemu-aarch64
#
# Only petra::core is built (PETRA_DATA=OFF): its dependencies are
# header-only, so the build machine's copies serve; zlib would need an
# aarch64 build of its own.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Static programs: qemu-aarch64 runs them without an aarch64 root file system.
set(CMAKE_EXE_LINKER_FLAGS_INIT -static)

# Boost, xsimd, xtl and doctest are header-only, installed under /usr/include
# for the build machine. The cross compiler searches there after its own
# directories, so that aarch64's C and C++ library headers come first; CMake
# sees /usr/include among the compiler's implicit directories and does not
# put it in front with -isystem.
set(CMAKE_CXX_FLAGS_INIT "-idirafter /usr/include")

# Their CMake package files are architecture independent: find them where
# the build machine's are (/usr/lib/x86_64-linux-gnu/cmake on an x86-64
# Debian), besides the usual places.
execute_process(COMMAND gcc -dumpmachine OUTPUT_VARIABLE petra_build_machine OUTPUT_STRIP_TRAILING_WHITESPACE)
list(APPEND CMAKE_PREFIX_PATH /usr/lib/${petra_build_machine}/cmake)

# -march=native would mean the build machine's CPU.
set(PETRA_NATIVE OFF CACHE BOOL "Compile petra's own targets with -march=native")

# ctest runs each test program under qemu-aarch64.
find_program(PETRA_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${PETRA_QEMU_AARCH64})
