# Shared by the scripts: the Debian packages petra's build, tests and
# benchmarks need, and a function that installs the missing ones.

# compilers and build tools (clang for the second compiler's build and the
# fuzzers, whose libFuzzer comes with libclang-rt-dev; clang's own standard
# library, libc++, for the test that a seed repeats on both libraries, label
# 'seeds'); the library's
# dependencies (zlib for gzip IDX files); test and benchmark frameworks; the
# Fashion-MNIST job's command line and JSON summary; MPI for PETRA's stages
# on ranks (optional to the build, installed so that the tests labelled
# 'mpi' run); the peer GEMM the benchmarks compare against; /usr/bin/time for
# the compile-time figure; pkg-config for the consumer built without CMake
# (tests/consumer); the real data; the runtimes the interchange tests
# (label 'interchange') exchange weights with: NumPy, PyTorch, ONNX's checker
# and OpenCV's ONNX runtime, for the system interpreter /usr/bin/python3;
# clang-format-14 for the C++ style (scripts/format, the test step format).
PETRA_PACKAGES=(
  g++ clang libclang-rt-dev libc++-14-dev libc++abi-14-dev cmake make
  clang-format-14
  libboost-dev libxtensor-dev libxsimd-dev zlib1g-dev
  doctest-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev
  time pkg-config
  dataset-fashion-mnist
  python3-numpy python3-torch python3-onnx python3-opencv
)

# The peer petra is measured against (scripts/peer): Debian's PyTorch and
# NumPy for the system interpreter (the interchange tests need them too, so
# the test script installs them as well).
PETRA_PEER_PACKAGES=(python3-torch python3-numpy)

# The aarch64 cross build of scripts/test: a cross compiler and qemu-user to
# run its programs. Optional: where they cannot be installed, that step is
# skipped with a message.
PETRA_CROSS_PACKAGES=(g++-aarch64-linux-gnu qemu-user)

petra_log() { printf '\033[1m[petra]\033[0m %s\n' "$*" >&2; }

# Prints those of the packages named that are not installed, one per line.
petra_missing_packages() {
  local package
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      echo "$package"
    fi
  done
}

# Installs whichever of the packages named (default: PETRA_PACKAGES) is
# missing. As root it runs apt-get; otherwise it prints the exact command to
# run and exits with an error.
petra_ensure_packages() {
  # PETRA_SKIP_PACKAGES=1: the caller provides the dependencies (another
  # distribution, a container without dpkg).
  if [ "${PETRA_SKIP_PACKAGES:-0}" = 1 ]; then return 0; fi
  local wanted=("$@")
  if [ ${#wanted[@]} -eq 0 ]; then wanted=("${PETRA_PACKAGES[@]}"); fi
  local missing
  mapfile -t missing < <(petra_missing_packages "${wanted[@]}")
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    petra_log "missing Debian packages: ${missing[*]}"
    petra_log "install them as root, then run this script again:"
    printf '  sudo apt-get update && sudo apt-get install -y %s\n' "${missing[*]}" >&2
    exit 1
  fi
  petra_log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}

# Like petra_ensure_packages, for optional packages: returns 1 (with the
# reason on stderr) instead of exiting when they are missing and cannot be
# installed (not root, or apt-get fails).
petra_try_packages() {
  if [ "${PETRA_SKIP_PACKAGES:-0}" = 1 ]; then return 0; fi
  local missing
  mapfile -t missing < <(petra_missing_packages "$@")
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    petra_log "missing Debian packages: ${missing[*]} (not root, so not installed; as root: apt-get install -y ${missing[*]})"
    return 1
  fi
  petra_log "installing Debian packages: ${missing[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; }; then
    petra_log "apt-get could not install: ${missing[*]}"
    return 1
  fi
}

# Configures (once) and builds a tree: petra_build DIR cmake-options...
# With PETRA_BUILD_TARGETS set (space-separated), builds only those targets.
petra_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    petra_log "configuring $dir"
    cmake -S "$PETRA_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@"
  fi
  petra_log "building $dir"
  local targets=()
  local target
  for target in ${PETRA_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
  cmake --build "$dir" --parallel "$(nproc)" ${targets[@]+"${targets[@]}"}
}
