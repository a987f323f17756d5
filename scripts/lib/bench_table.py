"""Turns the JSON of bench_kernels into the markdown tables of bench/RESULTS.md:
median time and GFLOP/s of every benchmark, and for GEMM the ratio of petra to
OpenBLAS on the same shape."""
import json
import sys


def main(path):
    with open(path) as handle:
        report = json.load(handle)
    # Repetitions run interleaved in random order; list the benchmarks in the
    # order the binary registers them.
    runs = [run for run in report["benchmarks"] if run.get("aggregate_name") == "median"]
    runs.sort(key=lambda run: (run["family_index"], run["per_family_instance_index"]))
    medians = {run["run_name"]: run for run in runs}
    context = report["context"]
    print(f"\nopenblas_core={context.get('openblas_core')} petra_simd={context.get('petra_simd')} "
          f"date={context.get('date')}\n")

    gemm = {}
    for name, run in medians.items():
        if name.startswith("gemm/"):
            _, library, shape = name.split("/", 2)
            gemm.setdefault(shape, {})[library] = run
    if gemm:
        print("| GEMM shape | petra GFLOP/s | OpenBLAS GFLOP/s | petra / OpenBLAS |")
        print("|---|---:|---:|---:|")
        for shape, runs in gemm.items():
            petra = runs.get("petra", {}).get("FLOPS", 0) / 1e9
            openblas = runs.get("openblas", {}).get("FLOPS", 0) / 1e9
            ratio = f"{petra / openblas:.2f}" if openblas else "-"
            print(f"| {shape.replace('/', ' ')} | {petra:.1f} | {openblas:.1f} | {ratio} |")
        print()

    convolutions = [(name, run) for name, run in medians.items() if name.startswith("convolution/")]
    if convolutions:
        print("| convolution (batch 64) | median time (us) | GFLOP/s |")
        print("|---|---:|---:|")
        for name, run in convolutions:
            label = name.replace("convolution/", "").replace("/", " ")
            print(f"| {label} | {run['real_time']:.0f} | {run['FLOPS'] / 1e9:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
