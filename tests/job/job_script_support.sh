# Sourced by the job's shell tests after they set `work`: skips the test
# (exit 77) when the installed dataset is missing, gives it an empty work
# directory, and defines fail (message, exit 1) and digest (the parameter
# digest of a job summary file).
data=/usr/share/datasets/fashion-mnist
if [[ ! -r $data/train-images-idx3-ubyte.gz ]]; then
    echo "skipped: $data has no Fashion-MNIST (the dataset-fashion-mnist package)"
    exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
fail() { echo "FAILED: $*"; exit 1; }
digest() { sed -n 's/.*"parameter_digest": "\([0-9a-f]*\)".*/\1/p' "$1"; }
