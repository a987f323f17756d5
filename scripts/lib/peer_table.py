"""Turns the results of scripts/peer (one directory: machine.json,
network_flops.json and, per round r, round<r>-fma_peak.json and the JSON
lines of petra's job and of the peer, each with <name>.others.json) into the
markdown table of bench/RESULTS.md: examples/s per configuration (median
over the rounds and each round's value), petra / peer ratios (per round,
measured minutes apart, and their median), and the effective rate as a
share of the FMA peak of the cores used.

A run is marked with * and left out of the medians (unless every round's
is) when its threads and the other processes running meanwhile needed more
cores than the machine has (by a tenth of a core or more): then some of its
threads waited for a core."""
import glob
import json
import os
import re
import statistics
import sys

# (file name in a round, label, threads, peer it is compared with)
CONFIGURATIONS = [
    ("petra-backprop", "petra, exact backprop", 1, "peer-1"),
    ("peer-1", "peer, backprop", 1, None),
    ("petra-j2", "petra, PETRA J=2", 2, "peer-2"),
    ("peer-2", "peer, backprop", 2, None),
    ("petra-j1", "petra, PETRA J=1 (reference)", 1, "peer-1"),
]
OVERSUBSCRIBED_CORES = 0.1
THREADS = {name: threads for name, _, threads, _ in CONFIGURATIONS}


def read_json(path):
    """The last line of a file of JSON lines (petra's job prints its summary
    last; the other files hold one line)."""
    with open(path) as handle:
        lines = [line for line in handle if line.strip()]
    return json.loads(lines[-1])


class Results:
    def __init__(self, directory, cores):
        self.directory = directory
        self.cores = cores
        self.rounds = sorted({int(m.group(1)) for path in glob.glob(os.path.join(directory, "round*-*.json"))
                              if (m := re.search(r"round(\d+)-", os.path.basename(path)))})

    def path(self, round_number, name, suffix=".json"):
        return os.path.join(self.directory, f"round{round_number}-{name}{suffix}")

    def rate(self, round_number, name):
        path = self.path(round_number, name)
        return read_json(path)["examples_per_second"] if os.path.exists(path) else None

    def others(self, round_number, name):
        """Cores other processes kept busy during the run (0 if unknown)."""
        path = self.path(round_number, name, ".others.json")
        return read_json(path)["others_cores"] if os.path.exists(path) else 0.0

    def disturbed(self, round_number, name):
        return self.others(round_number, name) + THREADS[name] >= self.cores + OVERSUBSCRIBED_CORES

    def fma_peaks(self):
        peaks = []
        for round_number in self.rounds:
            path = self.path(round_number, "fma_peak")
            if os.path.exists(path):
                with open(path) as handle:
                    report = json.load(handle)  # Google Benchmark's JSON report
                peaks += [run["FLOPS"] / 1e9 for run in report["benchmarks"] if run.get("aggregate_name") == "median"]
        return peaks


def clean_median(pairs):
    """Median of the values not disturbed, or of all if every one was."""
    clean = [value for value, disturbed in pairs if not disturbed]
    return statistics.median(clean or [value for value, _ in pairs])


def listed(pairs, digits):
    return ", ".join(f"{value:.{digits}f}{'*' if disturbed else ''}" for value, disturbed in pairs) or "-"


def main(directory):
    machine = read_json(os.path.join(directory, "machine.json"))
    results = Results(directory, machine["cores"])
    flops = read_json(os.path.join(directory, "network_flops.json"))
    flops_per_example = flops["forward_flops"] + flops["backward_flops"]
    peaks = results.fma_peaks()
    peak = statistics.median(peaks) if peaks else None

    precision = machine.get("precision", "fp32")
    if machine.get("isa", "native") != "native":
        precision += f", both sides in {machine['isa'].upper()}"
    print(f"| reference network, batch 64, Fashion-MNIST, {machine['steps']} steps, {precision} | threads "
          "| median examples/s | each round | petra / peer, each round | petra / peer, median "
          "| % of FMA peak (median) |")
    print("|---|---:|---:|---|---|---:|---:|")
    for name, label, threads, against in CONFIGURATIONS:
        rates = [(results.rate(r, name), results.disturbed(r, name)) for r in results.rounds]
        rates = [(rate, disturbed) for rate, disturbed in rates if rate is not None]
        if not rates:
            continue
        median = clean_median(rates)
        ratios = []
        if against:
            for r in results.rounds:
                ours, theirs = results.rate(r, name), results.rate(r, against)
                if ours and theirs:
                    ratios.append((ours / theirs, results.disturbed(r, name) or results.disturbed(r, against)))
        # The effective rate: the network's forward and backward FLOPs per
        # example (compile-time count) times examples/s, over the FMA peak of
        # the cores used.
        share = f"{100 * median * flops_per_example / (threads * peak * 1e9):.1f}%" if peak else "-"
        ratio = f"**{clean_median(ratios):.2f}**" if ratios else "-"
        print(f"| {label} | {threads} | {median:.0f} | {listed(rates, 0)} | {listed(ratios, 2)} | {ratio} "
              f"| {share} |")

    peak_text = (f"{peak:.1f} GFLOP/s (median of {len(peaks)} rounds, {min(peaks):.1f} to {max(peaks):.1f})"
                 if peak else "not measured")
    disturbed = sum(results.disturbed(r, name) for r in results.rounds for name, *_ in CONFIGURATIONS)
    print()
    print(f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['date']}, commit {machine['commit']}; "
          f"FMA peak of one core {peak_text}; {len(results.rounds)} interleaved rounds; "
          f"{flops_per_example / 1e6:.1f} MFLOP per example (forward + backward, compile-time count).")
    if disturbed:
        runs = f"{disturbed} run{'s' if disturbed > 1 else ''}"
        print(f"*: {runs} shared the cores with other processes (their threads and the others' needed more cores "
              "than there are), left out of the medians; figures on 2 threads, the peer's above all, "
              "suffer most. scripts/peer --wait-quiet waits for a quiet machine before each round.")
    print("Targets (issue 19, on every CPU): petra exact backprop / peer on 1 thread >= 1.8; PETRA J=2 / peer "
          "on 2 threads >= 1.8; exact backprop >= 60% of the FMA peak.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: peer_table.py RESULTS_DIRECTORY (written by scripts/peer)")
    main(sys.argv[1])
