"""Turns the JSON lines of bench_memory into the markdown tables of
bench/RESULTS.md: per network and method, the measured peak RSS next to the
compile-time memory plan (memory_plan.hpp), what petra's buffers account
for, the storage the schedule predicts and the plan's kept inputs (the FIFOs
of block inputs, summed over the stages; a pipeline's only); then, for the
pipelines, the plan's kept inputs stage by stage."""
import json
import sys


def mib(value):
    return f"{value / 2**20:.1f}"


def main():
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    print("| network | method | peak RSS (MiB) | memory plan (MiB) | plan / peak RSS "
          "| RSS growth while training (MiB) | accounted by petra (MiB) | predicted storage (MiB) "
          "| kept inputs, plan (MiB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        growth = row["peak_rss_bytes"] - row["rss_before_trainer_bytes"]
        ratio = row["planned_bytes"] / row["peak_rss_bytes"]
        kept = mib(row["kept_inputs_bytes"]) if "kept_inputs_bytes" in row else "-"
        print(f"| {row['network']} | {row['method']} | {mib(row['peak_rss_bytes'])} | {mib(row['planned_bytes'])} "
              f"| {ratio:.3f} | {mib(growth)} | {mib(row['accounted_bytes'])} "
              f"| {mib(row['predicted_storage_bytes'])} | {kept} |")

    pipelines = [row for row in rows if "kept_inputs_bytes_per_stage" in row]
    if pipelines:
        print()
        print("| network | method | kept inputs per stage, plan (MiB; stage 0 first) |")
        print("|---|---|---|")
        for row in pipelines:
            per_stage = ", ".join(mib(value) for value in row["kept_inputs_bytes_per_stage"])
            print(f"| {row['network']} | {row['method']} | {per_stage} |")


if __name__ == "__main__":
    main()
