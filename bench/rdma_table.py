#!/usr/bin/env python3
"""Reads the raw output of bench/rdma.sh (the VM's runs between "@@ run" and "@@ rc"
lines) and prints the table: medians over the rounds, fperf/peer ratios of the medians
and their lowest-highest ratio within one round."""
import json
import math
import re
import statistics
import sys

# Each fperf row's peers, by workload kind: the perftest program run the same way
# (rdma_cm with -R where fperf's row connects with rdma_cm), or the library's own test
# (libfabric's fi_pingpong, librdmacm's rstream for rsockets).
PEER = {
    "fperf ibverbs": ["ib_send_bw"],
    "fperf cm": ["ib_send_bw -R"],
    "fperf rsocket": ["ib_send_bw -R", "rstream"],
    "fperf --rdma-write": ["ib_write_bw"],
    "fperf ibverbs -r": ["ib_send_lat"],
    "fperf cm -r": ["ib_send_lat -R"],
    "fperf rsocket -r": ["ib_send_lat -R", "rstream"],
    "fperf ofi -r": ["fi_pingpong"],
    "fperf --rdma-write -r": ["ib_write_lat"],
}
TITLE = {
    "send_64k": "SEND bandwidth, 64 KiB messages (Mbit/s)",
    "send_1m": "SEND bandwidth, 1 MiB messages (Mbit/s)",
    "write_64k": "RDMA WRITE bandwidth, 64 KiB messages (Mbit/s)",
    "write_1m": "RDMA WRITE bandwidth, 1 MiB messages (Mbit/s)",
    "send_lat_2": "SEND round trip, 2 bytes (us)",
    "send_lat_64": "SEND round trip, 64 bytes (us)",
    "write_lat_2": "RDMA WRITE round trip, 2 bytes (us)",
    "write_lat_64": "RDMA WRITE round trip, 64 bytes (us)",
}


def parse_fperf(text):
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError:
        return None
    total = doc["client"]["total"]
    lat = total.get("send_latency")
    out = {"mbps": total["sent_bits_per_second"] / 1e6}
    if doc["settings"].get("mprtt") and lat:
        out.update(p50=lat["p50_ns"] / 1e3, p99=lat["p99_ns"] / 1e3, avg=lat["mean_ns"] / 1e3)
    return out


def parse_perftest(text):
    for line in text.splitlines():
        f = line.split()
        if len(f) == 5 and f[0].isdigit() and f[1].isdigit():
            # bytes iterations BW-peak BW-average MsgRate, in Gbit/s (--report_gbits)
            return {"mbps": float(f[3]) * 1e3}
        if len(f) == 9 and f[0].isdigit() and f[1].isdigit():
            # bytes iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%: halves of
            # the round trip, so doubled.
            return {"p50": 2 * float(f[4]), "avg": 2 * float(f[5]), "p99": 2 * float(f[7])}
    return None


def parse_pingpong(text):
    for line in text.splitlines():
        f = line.split()
        # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; a round trip is two
        # transfers, so usec/xfer is half of it (a mean only).
        if len(f) == 8 and f[0].isdigit() and f[4].endswith("s"):
            return {"avg": 2 * float(f[6])}
    return None


def parse_rstream(text, lat):
    for line in text.splitlines():
        f = line.split()
        # name size xfers iters total time Gb/sec usec/xfer; usec/xfer is half a round
        # trip with one transfer each way (a mean only).
        if len(f) == 8 and f[5].endswith("s") and f[0] != "name":
            return {"avg": 2 * float(f[7])} if lat else {"mbps": float(f[6]) * 1e3}
    return None


def main(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    runs = {}  # (workload, contender) -> {round: figures}
    order = []
    failed = {}
    for m in re.finditer(r"^@@ run (\d+)\|([^|\n]*)\|([^\n]*)\n(.*?)^@@ rc (\d+)$", text, re.M | re.S):
        rnd, w, c, body, rc = int(m[1]), m[2], m[3], m[4], int(m[5])
        key = (w, c)
        if key not in runs:
            runs[key] = {}
            order.append(key)
        if c.startswith("fperf"):
            fig = parse_fperf(body)
        elif c.startswith("fi_pingpong"):
            fig = parse_pingpong(body)
        elif c.startswith("rstream"):
            fig = parse_rstream(body, "_lat_" in w)
        else:
            fig = parse_perftest(body)
        # perftest now and then reports 0 for a run it completed (1 MiB, -n): no figure.
        if rc != 0 or fig is None or not all(math.isfinite(v) and v > 0 for v in fig.values()):
            failed.setdefault(key, []).append((rnd, rc, body.strip().splitlines()[-3:]))
            continue
        runs[key][rnd] = fig
    for line in text.splitlines():
        if line.startswith(("commit:", "host:", "rounds:", "placement:", "@@ round", "@@ end")):
            print(line.replace("@@ ", ""))

    def med(key, what):
        vals = [f[what] for f in runs[key].values() if what in f]
        return statistics.median(vals) if vals else None

    def ratio(a, b, what):
        both = [r for r in runs[a] if r in runs[b] and what in runs[a][r] and what in runs[b][r]]
        ma, mb = med(a, what), med(b, what)
        if not both or not ma or not mb:
            return "-"
        per = [runs[a][r][what] / runs[b][r][what] for r in both]
        return f"{ma / mb:.2f}x ({min(per):.2f}-{max(per):.2f})"

    def fmt(v):
        return "-" if v is None else f"{v:.1f}"

    workloads = list(dict.fromkeys(w for w, _ in order))
    for w in workloads:
        lat = "_lat_" in w
        print(f"\n## {TITLE.get(w, w)}")
        if lat:
            print(f"{'contender':28} {'p50':>9} {'p99':>9} {'avg':>9}  runs  {'fperf/peer p50 (range)':24} avg (range)")
        else:
            print(f"{'contender':28} {'Mbit/s':>9}  runs  fperf/peer (range)")
        for key in (k for k in order if k[0] == w):
            c = key[1]
            n = f"{len(runs[key])}/{len(runs[key]) + len(failed.get(key, []))}"
            peers = [(w, p) for p in PEER.get(c, []) if (w, p) in runs]

            def named(what):
                # The first peer's ratio, then any other's that has the figure, named.
                first = PEER.get(c, [None])[0]
                parts = [(p[1], ratio(key, p, what)) for p in peers]
                return "; ".join(
                    r + ("" if p == first else f" vs {p}") for p, r in parts if p == first or r != "-"
                )

            if lat:
                r50, ravg = named("p50"), named("avg")
                print(f"{c:28} {fmt(med(key, 'p50')):>9} {fmt(med(key, 'p99')):>9} "
                      f"{fmt(med(key, 'avg')):>9}  {n:>4}  {r50:24} {ravg}")
            else:
                print(f"{c:28} {fmt(med(key, 'mbps')):>9}  {n:>4}  {named('mbps')}")
    for key, fails in failed.items():
        for rnd, rc, tail in fails:
            print(f"failed: {key[0]} {key[1]} round {rnd} (exit {rc}): {' / '.join(tail)}")


if __name__ == "__main__":
    main(sys.argv[1])
