# shellcheck shell=bash
# Steps of scripts/test: each step's output goes to a log file under .build/test-logs/ (shown,
# the part that tells, when the step fails), and the run ends with one summary: each step's
# result, its tests passed/failed/skipped and its time, then the totals on a line of their own.
#
#   source scripts/lib/steps.sh
#   step NAME COMMAND...        # runs it; its status is remembered, never exits the script
#   AGAIN=1 step NAME COMMAND...  # tests counted by an earlier step, run again (under a
#                               # sanitizer): shown, but only their failures add to the totals
#   steps_summary               # prints the table and the totals; returns 1 if a step failed

STEP_LOGS="$PWD/.build/test-logs"
mkdir -p "$STEP_LOGS"
STEP_ROWS=()
STEP_FAILED=0
STEP_PASSED_TOTAL=0
STEP_FAILED_TOTAL=0
STEP_SKIPPED_TOTAL=0
STEP_FAILED_LOGS=()

# step NAME COMMAND...: runs COMMAND with its output in .build/test-logs/NAME.log.
step() {
    local name=$1
    shift
    local log="$STEP_LOGS/$name.log" start=$SECONDS status=0 counts passed failed skipped
    echo "test: $name ..." >&2
    "$@" >"$log" 2>&1 || status=$?
    local took=$((SECONDS - start))
    counts="$(python3 "$(dirname "${BASH_SOURCE[0]}")/count-tests.py" "$log")"
    read -r passed failed skipped <<<"$counts"
    if ((status != 0)); then
        STEP_FAILED=1
        # A failure the log does not count as a test (a build error, a crash) still counts one.
        ((failed > 0)) || failed=1
        echo "test: $name FAILED (exit $status) after $took s; what its log ($log) says:" >&2
        python3 "$(dirname "${BASH_SOURCE[0]}")/count-tests.py" --explain "$log" >&2
        STEP_FAILED_LOGS+=("$name:$log")
    fi
    STEP_FAILED_TOTAL=$((STEP_FAILED_TOTAL + failed))
    local note=""
    if [[ -n ${AGAIN:-} ]]; then
        note=" (again: not in the totals)"
    else
        STEP_PASSED_TOTAL=$((STEP_PASSED_TOTAL + passed))
        STEP_SKIPPED_TOTAL=$((STEP_SKIPPED_TOTAL + skipped))
    fi
    STEP_ROWS+=("$(printf '%-22s %-6s %7s %7s %8s %6s s%s' "$name" "$( ((status == 0)) && echo ok || echo FAILED)" "$passed" "$failed" "$skipped" "$took" "$note")")
    return 0
}

# True when a step so far failed.
steps_failed() { ((STEP_FAILED != 0)); }

steps_summary() {
    echo >&2
    echo "test: summary (logs in $STEP_LOGS)" >&2
    printf 'test: %-22s %-6s %7s %7s %8s %8s\n' step result passed failed skipped time >&2
    local r
    for r in "${STEP_ROWS[@]}"; do echo "test: $r" >&2; done
    # Last, what failed: each failed test with what it recorded, step by step.
    local entry name log
    for entry in "${STEP_FAILED_LOGS[@]}"; do
        name=${entry%%:*}
        log=${entry#*:}
        echo >&2
        echo "test: $name failed (log: $log):" >&2
        python3 "$(dirname "${BASH_SOURCE[0]}")/count-tests.py" --failures "$log" | sed 's/^/test:   /' >&2
    done
    echo "test: $STEP_PASSED_TOTAL passed, $STEP_FAILED_TOTAL failed, $STEP_SKIPPED_TOTAL skipped"
    ((STEP_FAILED == 0))
}
