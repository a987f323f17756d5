#!/bin/bash
# A README program that checkpoints, under a real interruption: run once
# without one (it must exit 0); run again from scratch, sent SIGINT as soon
# as its checkpoint file exists (it must stop, saved, with a status other
# than 0); run a third time, which must resume (saying so) and end with the
# last line of the uninterrupted run, its parameters' digest.
# Usage: interrupt_and_resume.sh PROGRAM WORK_DIR. The program writes its
# checkpoint into its working directory, as *.checkpoint.
set -u
program=$1
work=$2
fail() { echo "FAILED: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work/whole" "$work/stopped" || exit 1

(cd "$work/whole" && "$program" > out.txt 2>&1) || { cat "$work/whole/out.txt"; fail "the uninterrupted run failed"; }
whole=$(tail -n 1 "$work/whole/out.txt")

cd "$work/stopped" || exit 1
"$program" > first.txt 2>&1 &
pid=$!
while ! compgen -G "*.checkpoint" > /dev/null && kill -0 "$pid" 2> /dev/null; do sleep 0.02; done
kill -s INT "$pid" 2> /dev/null
wait "$pid"
status=$?
# A run that ended before the signal proves nothing: make the program train longer.
[[ $status != 0 ]] || { cat first.txt; fail "the run finished before SIGINT arrived"; }
compgen -G "*.checkpoint" > /dev/null || fail "no checkpoint after the stop"
"$program" > second.txt 2>&1 || { cat first.txt second.txt; fail "the resumed run failed"; }
grep -q "resumed" second.txt || { cat second.txt; fail "the second run did not say that it resumed"; }
resumed=$(tail -n 1 second.txt)
[[ $resumed == "$whole" ]] || fail "resumed run ended with '$resumed', the uninterrupted one with '$whole'"
echo "stopped with status $status: $(tail -n 1 first.txt)"
echo "$(grep resumed second.txt); ends as the uninterrupted run: $resumed"
