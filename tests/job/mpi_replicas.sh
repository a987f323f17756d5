#!/bin/bash
# The job with PETRA's pipeline in 2 replicas: on 4 MPI ranks (2 replicas
# of 2 ranks) it ends with the parameter digest of the simulator with
# --replicas 2; a launch the replicas do not divide is refused. (2 replicas
# of 1 rank, its stages on threads, are tested in test_mpi_replicas.)
# Usage: mpi_replicas.sh JOB_BINARY WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]
# Exits 77 (skipped) when the dataset is not installed.
set -u
job=$1
work=$2
shift 2
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/job_script_support.sh"
common=(--method petra --stages 2 --replicas 2 --epochs 1 --max-steps 12 --batch 16 --quiet)

"$job" "${common[@]}" --driver simulator --summary "$work/simulator.json" > /dev/null ||
    fail "the simulator with 2 replicas failed"
reference=$(digest "$work/simulator.json")
[[ -n $reference ]] || fail "no parameter digest in $work/simulator.json"
for ranks in 4; do
    "${mpiexec[@]}" "$ranks" "$job" "${common[@]}" --driver mpi --summary "$work/ranks$ranks.json" > /dev/null ||
        fail "2 replicas on $ranks ranks failed"
    grep -q "\"ranks\": $ranks, \"replicas\": 2" "$work/ranks$ranks.json" ||
        fail "the summary does not say $ranks ranks and 2 replicas"
    [[ $(digest "$work/ranks$ranks.json") == "$reference" ]] ||
        fail "2 replicas on $ranks ranks: digest $(digest "$work/ranks$ranks.json"), simulator $reference"
    echo "2 replicas on $ranks ranks: digest $reference, as the simulator's"
done
"${mpiexec[@]}" 3 "$job" "${common[@]}" --driver mpi > /dev/null 2> "$work/three.log" &&
    fail "3 ranks for 2 replicas were not refused"
grep -q "3 MPI ranks cannot hold 2 replicas of equal size" "$work/three.log" || { cat "$work/three.log"; fail "no refusal"; }
echo "3 ranks for 2 replicas: refused"
