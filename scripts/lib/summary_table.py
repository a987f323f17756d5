"""Prints the JSON summaries of fashion_mnist runs side by side, as a
markdown table."""
import json
import sys


def main(paths):
    print("| method | stages | k | epochs | test accuracy | training time | examples/s | peak memory (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        with open(path) as handle:
            run = json.loads(handle.readline())
        minutes, seconds = divmod(run["train_seconds"], 60)
        print(f"| {run['method']} | {run['stages']} | {run['accumulation']} | {run['epochs']} "
              f"| {100 * run['test_accuracy']:.2f}% | {int(minutes)}m{seconds:04.1f}s "
              f"| {run['examples_per_second']:.0f} | {run['peak_rss_bytes'] / 2**20:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
