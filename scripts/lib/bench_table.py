"""Turns the JSON of bench_kernels and bench_training into the markdown tables
of bench/RESULTS.md: the core's FMA peak and what it streams per working-set
size, median time and GFLOP/s of every benchmark, for GEMM the ratio of
petra to OpenBLAS on the same shape, for training steps examples/s, memory
and the rate relative to exact backprop."""
import json
import sys


def main(paths):
    for path in paths:
        with open(path) as handle:
            text = handle.read()
        # A binary whose benchmarks were all filtered out writes nothing.
        if text.strip():
            print_tables(json.loads(text))


def print_tables(report):
    # Repetitions run interleaved in random order; list the benchmarks in the
    # order the binary registers them.
    runs = [run for run in report["benchmarks"] if run.get("aggregate_name") == "median"]
    runs.sort(key=lambda run: (run["family_index"], run["per_family_instance_index"]))
    medians = {run["run_name"]: run for run in runs}
    context = report["context"]
    facts = [f"{key}={context[key]}" for key in ("openblas_core", "petra_simd", "date") if key in context]
    print("\n" + " ".join(facts) + "\n")

    peak = medians.get("peak/fma")
    if peak:
        print(f"FMA peak of one core: {peak['FLOPS'] / 1e9:.1f} GFLOP/s ({int(peak['accumulators'])} independent "
              f"accumulators of {int(peak['lanes'])} float lanes)\n")

    streams = {}
    for name, run in medians.items():
        if name.startswith(("peak/read/", "peak/copy/")):
            _, kind, size = name.split("/", 2)
            streams.setdefault(size.replace("KiB:", ""), {})[kind] = run["bytes_per_second"] / 1e9
    if streams:
        print("| working set (KiB) | one core reads (GB/s) | one core copies (GB/s) |")
        print("|---:|---:|---:|")
        for size, rates in streams.items():
            print(f"| {size} | {rates.get('read', 0):.1f} | {rates.get('copy', 0):.1f} |")
        print()

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

    training = [(name, run) for name, run in medians.items() if name.startswith("training/")]
    if training:
        exact = next((run for name, run in training if "exact_backprop" in name), None)
        print("| reference network, one thread | median time per batch (ms) | examples/s "
              "| useful GFLOP/s | memory held (MiB) | examples/s / exact backprop's |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, run in training:
            label = name.replace("training/", "").replace("/real_time", "").replace("/", " ")
            memory = f"{run['bytes'] / 2**20:.1f}" if "bytes" in run else "-"
            ratio = f"{run['items_per_second'] / exact['items_per_second']:.2f}" if exact else "-"
            print(f"| {label} | {run['real_time']:.1f} | {run['items_per_second']:.0f} | "
                  f"{run['FLOPS'] / 1e9:.1f} | {memory} | {ratio} |")

    epochs = [(name, run) for name, run in medians.items() if name.startswith("epoch/")]
    if epochs:
        single = next((run for name, run in epochs if name.startswith("epoch/petra/threads:1")), None)
        exact = next((run for name, run in epochs if "exact_backprop" in name), None)
        print("| reference network, epoch of "
              f"{report['context'].get('micro_batches_per_epoch', '?')} micro-batches of 64 | median time (ms) "
              "| examples/s | memory held (MiB) | / PETRA in 1 stage | / exact backprop |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, run in epochs:
            label = name.replace("epoch/", "").replace("/real_time", "").replace("/", " ")
            rate = run["items_per_second"]
            against_single = f"{rate / single['items_per_second']:.2f}" if single else "-"
            against_exact = f"{rate / exact['items_per_second']:.2f}" if exact else "-"
            print(f"| {label} | {run['real_time']:.0f} | {rate:.0f} | {run['bytes'] / 2**20:.1f} "
                  f"| {against_single} | {against_exact} |")
        print()

    stages = [(name, run) for name, run in medians.items() if name.startswith("stage/")]
    if stages:
        print("| one stage alone, forward + backward of a micro-batch of 64 | blocks | median time (ms) |")
        print("|---|---|---:|")
        for name, run in stages:
            label = name.replace("stage/", "").replace("/real_time", "").replace("/", " ")
            first = int(run["first_block"])
            print(f"| {label} | {first} to {first + int(run['blocks']) - 1} | {run['real_time']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
