"""Turns the results of scripts/peer (one directory: machine.json,
network_flops.json and, per round r, round<r>-fma_peak.json and the JSON
lines of petra's job and of the peer) into the markdown table of
bench/RESULTS.md: examples/s per configuration (median over the rounds and
each round's value), petra / peer ratios (per round, measured minutes
apart, and their median), and the effective rate as a share of the FMA
peak of the cores used."""
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


def read_json(path):
    """The last line of a file of JSON lines (petra's job prints its summary
    last; the other files hold one line)."""
    with open(path) as handle:
        lines = [line for line in handle if line.strip()]
    return json.loads(lines[-1])


def main(directory):
    machine = read_json(os.path.join(directory, "machine.json"))
    flops = read_json(os.path.join(directory, "network_flops.json"))
    flops_per_example = flops["forward_flops"] + flops["backward_flops"]
    rounds = sorted({int(m.group(1)) for path in glob.glob(os.path.join(directory, "round*-*.json"))
                     if (m := re.search(r"round(\d+)-", os.path.basename(path)))})

    def value(round_number, name):
        path = os.path.join(directory, f"round{round_number}-{name}.json")
        return read_json(path)["examples_per_second"] if os.path.exists(path) else None

    peaks = []
    for round_number in rounds:
        path = os.path.join(directory, f"round{round_number}-fma_peak.json")
        if os.path.exists(path):
            with open(path) as handle:
                report = json.load(handle)  # Google Benchmark's JSON report
            peaks += [run["FLOPS"] / 1e9 for run in report["benchmarks"] if run.get("aggregate_name") == "median"]
    peak = statistics.median(peaks) if peaks else None

    print(f"| reference network, batch 64, Fashion-MNIST, {machine['steps']} steps | threads "
          "| median examples/s | each round | petra / peer, each round | petra / peer, median "
          "| % of FMA peak (median) |")
    print("|---|---:|---:|---|---|---:|---:|")
    for name, label, threads, against in CONFIGURATIONS:
        values = [value(r, name) for r in rounds]
        present = [v for v in values if v is not None]
        if not present:
            continue
        median = statistics.median(present)
        ratios = []
        if against:
            ratios = [v / p for v, p in zip(values, [value(r, against) for r in rounds]) if v and p]
        # The effective rate: the network's forward and backward FLOPs per
        # example (compile-time count) times examples/s, over the FMA peak of
        # the cores used.
        share = f"{100 * median * flops_per_example / (threads * peak * 1e9):.1f}%" if peak else "-"
        print(f"| {label} | {threads} | {median:.0f} | {', '.join(f'{v:.0f}' for v in present)} "
              f"| {', '.join(f'{r:.2f}' for r in ratios) or '-'} "
              f"| {f'**{statistics.median(ratios):.2f}**' if ratios else '-'} | {share} |")

    # Cores other processes kept busy just before each round (scripts/peer).
    loads = [read_json(os.path.join(directory, f"round{r}-load.json")).get("busy_cores", 0.0) for r in rounds
             if os.path.exists(os.path.join(directory, f"round{r}-load.json"))]
    peak_text = (f"{peak:.1f} GFLOP/s (median of {len(peaks)} rounds, {min(peaks):.1f} to {max(peaks):.1f})"
                 if peak else "not measured")
    print()
    print(f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['date']}, commit {machine['commit']}; "
          f"FMA peak of one core {peak_text}; {len(rounds)} interleaved rounds "
          f"(cores busy with other processes before each: {', '.join(f'{load:.2f}' for load in loads) or '-'}); "
          f"{flops_per_example / 1e6:.1f} MFLOP per example (forward + backward, compile-time count).")
    if any(load >= 0.1 for load in loads):
        print("Warning: other processes were running; figures on 2 threads (the peer's above all) are then "
              "unreliable. scripts/peer --wait-quiet waits for a quiet machine.")
    print("Targets: petra exact backprop / peer on 1 thread >= 1.5; PETRA J=2 / peer on 2 threads >= 1.5; "
          "exact backprop >= 55% of the FMA peak.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: peer_table.py RESULTS_DIRECTORY (written by scripts/peer)")
    main(sys.argv[1])
