"""Turns bench/rdma_instructions.sh's VM output into instructions per round trip.

Each line "@@ REPEAT TOOL SIDE ROUND_TRIPS rc=A/B TOTAL SORTED" is one callgrind run:
its total instructions and what its calls to qsort cost. Per round trip is the
difference between the runs of 5N and N round trips of one repeat, less the sort, over
4N; the table gives the median over the repeats and their range.
"""

import statistics
import sys


def per_round_trip(runs):
    """`runs`: {round_trips: (total, sorted)} with two entries; instructions per round trip."""
    (few, (t1, s1)), (many, (t2, s2)) = sorted(runs.items())
    return ((t2 - s2) - (t1 - s1)) / (many - few)


def main():
    size, n = sys.argv[1], int(sys.argv[2])
    runs = {}
    failed = []
    for line in sys.stdin:
        if not line.startswith("@@ "):
            continue
        repeat, tool, side, trips, rc, total, sorted_ = line.split()[1:8]
        if rc != "rc=0/0":
            failed.append(f"{tool} {side} {trips} (repeat {repeat}): {rc}")
            continue
        runs.setdefault((side, tool, repeat), {})[int(trips)] = (int(total), int(sorted_))
    if failed:
        sys.exit("runs failed: " + "; ".join(failed))
    print(f"## User-space instructions per SEND round trip, {size} bytes "
          f"(callgrind, {n} and {5 * n} round trips)")
    print(f"{'side':8} {'fperf':>18} {'ib_send_lat':>18} {'fperf/peer':>11}")
    for side in ("client", "server"):
        cells = []
        for tool in ("fperf", "ib_send_lat"):
            counts = [per_round_trip(r) for (s, t, _), r in sorted(runs.items())
                      if (s, t) == (side, tool)]
            cells.append((statistics.median(counts), min(counts), max(counts)))
        text = [f"{m:6.0f} ({lo:.0f}-{hi:.0f})" for m, lo, hi in cells]
        print(f"{side:8} {text[0]:>18} {text[1]:>18} {cells[0][0] / cells[1][0]:10.2f}x")


if __name__ == "__main__":
    main()
