#!/bin/bash
# The job's front end under a real signal: a PETRA run on Fashion-MNIST sent
# SIGINT mid-run finishes its tick, saves, exits with 130 and says how to
# resume; resumed, it ends with the parameters of a run never stopped (the
# summaries' parameter digests agree). SIGTERM the same, with 143.
# Usage: stop_and_resume.sh JOB_BINARY WORK_DIR. Exits 77 (skipped) when the
# dataset is not installed.
set -u
job=$1
work=$2
source "$(dirname "${BASH_SOURCE[0]}")/job_script_support.sh"
common=(--method petra --stages 3 --epochs 1 --max-steps 120 --batch 32 --quiet)

"$job" "${common[@]}" --summary "$work/whole.json" > /dev/null || fail "the uninterrupted run failed"
whole=$(digest "$work/whole.json")
[[ -n $whole ]] || fail "no parameter digest in $work/whole.json"

# Starts a run with a checkpoint every 10 micro-batches and sends it the
# signal as soon as the first one exists, so that the stop lands inside
# training whatever the machine's speed; sets status.
stop_inside_training() {
    local signal=$1
    rm -f "$checkpoint"
    "$job" "${common[@]}" --checkpoint "$checkpoint" --checkpoint-every 10 > /dev/null 2> "$work/$signal.log" &
    local pid=$!
    while [[ ! -s $checkpoint ]] && kill -0 "$pid" 2> /dev/null; do sleep 0.05; done
    kill -s "$signal" "$pid" 2> /dev/null
    wait "$pid"
    status=$?
}

for signal in INT TERM; do
    checkpoint=$work/$signal.checkpoint
    stop_inside_training "$signal"
    expected=$([[ $signal == INT ]] && echo 130 || echo 143)
    # A run that ended before the signal proves nothing: a failure, so that
    # it cannot pass unnoticed (raise --max-steps if machines get that fast).
    [[ $status != 0 ]] || fail "the run finished before SIG$signal arrived"
    [[ $status == "$expected" ]] || { cat "$work/$signal.log"; fail "SIG$signal: exit status $status, not $expected"; }
    grep -q "stopped by SIG$signal at epoch 1, micro-batch" "$work/$signal.log" || { cat "$work/$signal.log"; fail "no stop message"; }
    [[ -s $checkpoint ]] || fail "SIG$signal: no checkpoint at $checkpoint"
    grep "stopped by" "$work/$signal.log"
    "$job" "${common[@]}" --checkpoint "$checkpoint" --resume --summary "$work/$signal.json" > /dev/null 2>> "$work/$signal.log" ||
        { cat "$work/$signal.log"; fail "SIG$signal: the resumed run failed"; }
    resumed=$(digest "$work/$signal.json")
    [[ $resumed == "$whole" ]] || fail "SIG$signal: resumed digest $resumed, uninterrupted $whole"
    echo "SIG$signal: stopped, resumed, digest $resumed equals the uninterrupted run's"
done
rm -rf "$work"
