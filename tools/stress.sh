#!/usr/bin/env bash
# Runs one test (or several, a -run pattern) many times, some at once, and
# keeps the log of every failing run with the seed the test printed, so a
# flake seen once can be looked at and replayed (make stress; see the Makefile).
#
#   tools/stress.sh PKG PATTERN RUNS PARALLEL OUT [LOAD]
#
# PKG is a package directory (./e2e), PATTERN a go test -run pattern, OUT the
# directory for logs. With LOAD=1 a full `go test ./...` runs in a loop beside
# the runs, as the load under which the suite's flakes were seen.
set -euo pipefail
pkg=${1:?package directory, e.g. ./e2e}
pattern=${2:?test pattern, e.g. 'TestReshard$'}
runs=${3:-20}
parallel=${4:-2}
out=${5:-$(mktemp -d /tmp/rowlift-stress-XXXX)}
load=${6:-0}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

bin="$out/stress.test"
(cd "$root" && go test -c -o "$bin" "$pkg")

loadpid=
if [ "$load" = 1 ]; then
	# Under this load e2e takes longer than go test's default ten minutes, and
	# longer than make test's twenty. A failing round's log is kept too.
	# Its own process group, so the trap stops the go test running, too.
	(cd "$root" && exec setsid bash -c 'for i in $(seq 1 100000); do
		go test -count=1 -timeout 60m ./... > "$1/load.log" 2>&1 || mv "$1/load.log" "$1/load-$i.log"
	done' load "$out") &
	loadpid=$!
	trap 'kill -- -$loadpid 2>/dev/null || true' EXIT
fi

# run N runs the test binary once, from the package directory (tests find
# ../cmd/rowlift and their fixtures relative to it), and keeps its log only
# when it fails.
run() {
	local n=$1 log="$out/run-$1.log"
	if ! (cd "$root/$pkg" && "$bin" -test.run "$pattern" -test.count=1 -test.v -test.timeout 30m) > "$log" 2>&1; then
		echo "run $n: FAIL ($log)"
	elif ! grep -q -- '--- PASS' "$log"; then
		# A pattern that matches nothing passes: a stress of nothing.
		echo "run $n: FAIL: no test matched $pattern ($log)"
	else
		rm -f "$log"
		echo "run $n: ok"
	fi
}

# The first run alone: a pattern that matches no test stops here.
run 1 | tee "$out/summary"
if grep -q "no test matched" "$out/summary"; then
	exit 2
fi

for n in $(seq 2 "$runs"); do
	while [ "$(jobs -rp | grep -cv "^${loadpid:-none}$")" -ge "$parallel" ]; do
		sleep 0.5
	done
	run "$n" | tee -a "$out/summary" &
done
wait $(jobs -rp | grep -v "^${loadpid:-none}$") 2>/dev/null || true

failed=$(grep -c FAIL "$out/summary" || true)
echo "$pattern in $pkg: $runs runs, $failed failed; logs of failed runs in $out"
for log in "$out"/run-*.log; do
	[ -e "$log" ] || continue
	echo "$log:"
	grep -hE -- '--- FAIL|ROWLIFT_TEST_SEED=' "$log" | sed 's/^/  /' | head -20
done
[ "$failed" = 0 ]
