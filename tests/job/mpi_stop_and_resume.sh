#!/bin/bash
# The job across drivers under real signals: a run on 2 MPI ranks stopped
# by SIGINT (mpiexec passes SIGTERM to the ranks) saves its checkpoint and
# resumes on threads; a run on threads stopped by SIGINT resumes on 2 MPI
# ranks; both end with the parameter digest of a run never stopped, and so
# does the same run on 2 ranks from start to end.
# Usage: mpi_stop_and_resume.sh JOB_BINARY WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]
# Exits 77 (skipped) when the dataset is not installed.
set -u
job=$1
work=$2
shift 2
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/job_script_support.sh"
common=(--method petra --stages 2 --epochs 1 --max-steps 120 --batch 32 --quiet)

"$job" "${common[@]}" --summary "$work/whole.json" > /dev/null || fail "the uninterrupted run on threads failed"
whole=$(digest "$work/whole.json")
[[ -n $whole ]] || fail "no parameter digest in $work/whole.json"
"${mpiexec[@]}" "$job" "${common[@]}" --driver mpi --summary "$work/ranks.json" > /dev/null ||
    fail "the uninterrupted run on 2 ranks failed"
grep -q '"driver": "mpi", "ranks": 2' "$work/ranks.json" || fail "the summary does not say 2 ranks"
[[ $(digest "$work/ranks.json") == "$whole" ]] || fail "2 ranks: digest $(digest "$work/ranks.json"), threads $whole"
echo "2 ranks from start to end: digest $whole, as on threads"

# Runs "$@" in the background with a checkpoint every 10 micro-batches and
# sends SIGINT as soon as the first one exists: the stop then lands inside
# training whatever the machine's speed (a fixed delay either came before
# the first micro-batch or after the last on some machine).
stop_after() {
    local log=$1
    shift
    rm -rf "$checkpoint"*
    "$@" --checkpoint "$checkpoint" --checkpoint-every 10 > /dev/null 2> "$log" &
    local pid=$!
    while [[ ! -s $checkpoint ]] && kill -0 "$pid" 2> /dev/null; do sleep 0.05; done
    kill -s INT "$pid" 2> /dev/null
    wait "$pid"
    local status=$?
    [[ $status != 0 ]] || fail "the run finished before SIGINT arrived (raise --max-steps if machines get that fast)"
    grep -q "stopped by SIG[A-Z]* at epoch 1, micro-batch" "$log" || { cat "$log"; fail "no stop message"; }
    [[ -s $checkpoint ]] || fail "no checkpoint at $checkpoint"
    grep "stopped by" "$log"
}

checkpoint=$work/from-ranks.checkpoint
stop_after "$work/from-ranks.log" "${mpiexec[@]}" "$job" "${common[@]}" --driver mpi
"$job" "${common[@]}" --driver threads --checkpoint "$checkpoint" --resume --summary "$work/from-ranks.json" \
    > /dev/null 2>> "$work/from-ranks.log" || { cat "$work/from-ranks.log"; fail "resuming on threads failed"; }
[[ $(digest "$work/from-ranks.json") == "$whole" ]] || fail "saved on ranks, resumed on threads: another digest"
echo "saved on 2 ranks, resumed on threads: digest $whole"

checkpoint=$work/from-threads.checkpoint
stop_after "$work/from-threads.log" "$job" "${common[@]}" --driver threads
"${mpiexec[@]}" "$job" "${common[@]}" --driver mpi --checkpoint "$checkpoint" --resume \
    --summary "$work/from-threads.json" > /dev/null 2>> "$work/from-threads.log" ||
    { cat "$work/from-threads.log"; fail "resuming on 2 ranks failed"; }
[[ $(digest "$work/from-threads.json") == "$whole" ]] || fail "saved on threads, resumed on ranks: another digest"
echo "saved on threads, resumed on 2 ranks: digest $whole"
rm -rf "$work"
