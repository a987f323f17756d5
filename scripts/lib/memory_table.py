"""Turns the JSON lines of bench_memory into the markdown table of
bench/RESULTS.md: the measured peak RSS next to the compile-time memory
plan (memory_plan.hpp), and what petra's buffers account for."""
import json
import sys


def mib(value):
    return f"{value / 2**20:.1f}"


def main():
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    print("| method | peak RSS (MiB) | memory plan (MiB) | plan / peak RSS "
          "| RSS growth while training (MiB) | accounted by petra (MiB) | predicted storage (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        growth = row["peak_rss_bytes"] - row["rss_before_trainer_bytes"]
        ratio = row["planned_bytes"] / row["peak_rss_bytes"]
        print(f"| {row['method']} | {mib(row['peak_rss_bytes'])} | {mib(row['planned_bytes'])} | {ratio:.3f} "
              f"| {mib(growth)} | {mib(row['accounted_bytes'])} | {mib(row['predicted_storage_bytes'])} |")


if __name__ == "__main__":
    main()
