"""Turns the outputs of scripts/compare (one directory: base-<r>.txt and
tree-<r>.txt, bench_breakdown's report per round r) into a markdown table:
per figure the median ms of each side over the rounds, the median of the
per-round speedups (base ms / tree ms) and their range.

Usage: compare_table.py DIRECTORY BASE_NAME TREE_NAME [--geometries]"""
import glob
import os
import re
import statistics
import sys

HEADLINES = [
    (re.compile(r"^exact backprop step \(gradient and optimizer\): .*?([\d.]+) ms per step"), "exact backprop step"),
    (re.compile(r"^PETRA J=2, stage 0 tick .*?([\d.]+) ms per step"), "PETRA J=2, stage 0 tick"),
    (re.compile(r"^PETRA J=2, stage 1 tick .*?([\d.]+) ms per step"), "PETRA J=2, stage 1 tick"),
]
KIND_ROW = re.compile(r"^\| ([^|*][^|]*?) \| (\d+) \| ([\d.]+) \|")
GEOMETRY_ROW = re.compile(r"^\| ([^|*][^|]*?) \| ([^|]+?) \| (\d+) \| ([\d.]+) \|")


def figures(path, geometries):
    """{figure: ms per step} of one bench_breakdown report: the headlines,
    the kinds of the exact step's first table and, if asked, its geometries."""
    values = {}
    section = None
    with open(path) as report:
        for line in report:
            for pattern, name in HEADLINES:
                match = pattern.match(line)
                if match:
                    values[name] = float(match.group(1))
                    section = name
            if line.startswith("exact backprop step (gradient and optimizer), every kernel geometry"):
                section = "geometries"
            if section == "exact backprop step":
                match = KIND_ROW.match(line)
                if match and match.group(1) != "kind":
                    values[match.group(1)] = float(match.group(3))
            elif section == "geometries" and geometries:
                match = GEOMETRY_ROW.match(line)
                if match and match.group(1) != "kernel":
                    values[f"{match.group(1)}, {match.group(2)}"] = float(match.group(4))
    return values


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    directory, base_name, tree_name = argv[1:4]
    geometries = "--geometries" in argv[4:]
    rounds = sorted(int(m.group(1)) for path in glob.glob(os.path.join(directory, "base-*.txt"))
                    if (m := re.search(r"base-(\d+)\.txt$", path)))
    pairs = []
    for r in rounds:
        tree_path = os.path.join(directory, f"tree-{r}.txt")
        if os.path.exists(tree_path):
            pairs.append((figures(os.path.join(directory, f"base-{r}.txt"), geometries), figures(tree_path, geometries)))
    if not pairs:
        sys.exit(f"compare_table.py: no complete round in {directory}")
    # The headlines first, then the kernels in the report's order.
    headlines = [name for _, name in HEADLINES]
    names = [name for name in headlines + [n for n in pairs[0][0] if n not in headlines]
             if all(name in base and name in tree for base, tree in pairs)]
    print(f"| figure ({len(pairs)} rounds, ms per step) | base {base_name} | tree {tree_name} "
          "| speedup (base / tree), median | rounds |")
    print("|---|---:|---:|---:|---|")
    for name in names:
        base_values = [base[name] for base, _ in pairs]
        tree_values = [tree[name] for _, tree in pairs]
        ratios = [b / t for b, t in zip(base_values, tree_values) if b > 0 and t > 0]
        if len(ratios) < len(pairs):  # a figure below the report's 0.01 ms
            print(f"| {name} | {statistics.median(base_values):.2f} | {statistics.median(tree_values):.2f} | - | - |")
            continue
        print(f"| {name} | {statistics.median(base_values):.2f} | {statistics.median(tree_values):.2f} "
              f"| **{statistics.median(ratios):.3f}x** | {min(ratios):.3f}-{max(ratios):.3f} |")
    # The machine line of the first round's base report (CPU, caches, FMA peak, date).
    with open(os.path.join(directory, f"base-{rounds[0]}.txt")) as report:
        machine = next((line.strip() for line in report if line.startswith("machine: ")), None)
    if machine:
        print(f"\nMachine (base, round {rounds[0]}): {machine[len('machine: '):]}")


if __name__ == "__main__":
    main(sys.argv)
