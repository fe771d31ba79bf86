#!/bin/sh
# Prints `laggard analyze`'s output (and exit status) for every run directory in tests/data with
# two builds of the program and says which differ: a change that only makes reading faster must
# leave every one byte-identical.
#   sh bench/analyze_outputs_diff.sh OLD_PROGRAM NEW_PROGRAM [DATA_DIR]
old=$1 new=$2 data=${3:-tests/data}
[ -x "$old" ] && [ -x "$new" ] || { echo "usage: $0 OLD_PROGRAM NEW_PROGRAM [DATA_DIR]" >&2; exit 2; }
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
runs=0 differ=0
for dir in "$data"/*/; do
  for args in "analyze -q" "analyze -q --json" "analyze -q --preset rfc"; do
    runs=$((runs + 1))
    "$old" $args "$dir" > "$tmp/old" 2>&1; echo "exit $?" >> "$tmp/old"
    "$new" $args "$dir" > "$tmp/new" 2>&1; echo "exit $?" >> "$tmp/new"
    if ! cmp -s "$tmp/old" "$tmp/new"; then
      differ=$((differ + 1))
      echo "differs: $args $dir"
    fi
  done
done
echo "$runs outputs compared, $differ differ"
[ "$differ" -eq 0 ]
