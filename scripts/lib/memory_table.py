"""Turns the JSON lines of bench_memory into the markdown table of
bench/RESULTS.md."""
import json
import sys


def mib(value):
    return f"{value / 2**20:.1f}"


def main():
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    print("| method | peak RSS (MiB) | RSS growth while training (MiB) "
          "| accounted by petra (MiB) | predicted storage (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        growth = row["peak_rss_bytes"] - row["rss_before_trainer_bytes"]
        print(f"| {row['method']} | {mib(row['peak_rss_bytes'])} | {mib(growth)} "
              f"| {mib(row['accounted_bytes'])} | {mib(row['predicted_storage_bytes'])} |")


if __name__ == "__main__":
    main()
