"""Tests of bench/compare's target verdicts, pooling and row labels, on made-up samples
(no runs), and of how it stops the servers it starts.

python3 -m unittest discover -s bench -p 'test_*.py'
"""

import importlib.machinery
import importlib.util
import os
import re
import signal
import subprocess
import unittest

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare")
_loader = importlib.machinery.SourceFileLoader("compare", _PATH)
_spec = importlib.util.spec_from_loader("compare", _loader)
compare = importlib.util.module_from_spec(_spec)
_loader.exec_module(compare)


def run(rows, workload="tcp4_32k"):
    """One run's results: `rows` maps a row label to its per-round Gbit/s."""
    return [{"name": workload, "rows": [
        {"label": label, "samples": [{"round": r, "gbit_s": v} for r, v in enumerate(vals)]}
        for label, vals in rows.items()]}]


def target(runs, title):
    return next(t for t in compare.evaluate_targets(runs) if t["target"] == title)


class Targets(unittest.TestCase):
    def test_fperf_is_measured_against_the_best_peer(self):
        t = target([run({"fperf -t 4": [50, 52, 51],
                         "iperf2 -P 4": [40, 41, 42],
                         "iperf3 -P 4": [48, 49, 50]})], "TCP bulk 4 x 32 KiB")
        self.assertEqual(t["peer"], "iperf3 -P 4")
        self.assertAlmostEqual(t["ratio"], 51 / 49)
        self.assertTrue(t["met"])
        low, high = t["ci95"]
        self.assertLessEqual(low, t["ratio"])
        self.assertGreaterEqual(high, t["ratio"])

    def test_a_miss_inside_the_noise_is_still_a_miss(self):
        runs = [run({"fperf -t 4 -C cubic": [100, 130, 120, 125],
                     "iperf2 -P 4 -Z cubic": [128, 101, 121, 126]})]
        t = target(runs, "TCP bulk 4 x 32 KiB, cubic")
        self.assertLess(t["ratio"], 1.0)
        self.assertFalse(t["met"])
        low, high = t["ci95"]
        self.assertTrue(low < 1.0 < high)
        line = compare.render_targets([t], 1)
        self.assertIn("NOT MET (within noise", line)

    def test_pooling_takes_every_round_of_every_run(self):
        a = run({"fperf -t 4": [10, 10, 10], "iperf2 -P 4": [9, 9, 9]})
        b = run({"fperf -t 4": [8, 8, 8, 8], "iperf2 -P 4": [9, 9, 9, 9]})
        t = target([a, b], "TCP bulk 4 x 32 KiB")
        self.assertEqual(t["rounds"], 7)
        # Medians of 7 rounds each: fperf 8 (four 8s, three 10s), iperf2 9.
        self.assertAlmostEqual(t["ratio"], 8 / 9)
        self.assertFalse(t["met"])

    def test_pooled_rows_take_every_round_of_the_runs_that_have_them(self):
        a = run({"fperf -t 4": [10, 11, 12], "iperf2 -P 4": [9, 9, 9]})
        b = run({"fperf -t 4": [13, 14, 15, 16]})
        lines = compare.render_pooled_rows([a, b]).splitlines()
        fperf = next(l for l in lines if l.startswith("fperf -t 4"))
        iperf2 = next(l for l in lines if l.startswith("iperf2 -P 4"))
        # fperf: median of 10..16 over 7 rounds; iperf2 is only in the first run.
        self.assertEqual(fperf.split()[-3:], ["13.00", "-", "7"])
        self.assertEqual(iperf2.split()[-3:], ["9.00", "-", "3"])

    def test_lower_is_better_for_cpu_and_latency(self):
        runs = [[{"name": "tcp_lat_1", "rows": [
            {"label": "fperf --echo (1 B echo)",
             "samples": [{"round": r, "rtt_p50_us": 60.0} for r in range(3)]},
            {"label": "sockperf pp (14 B echo)",
             "samples": [{"round": r, "rtt_p50_us": 75.0} for r in range(3)]},
            {"label": "qperf tcp_lat (1 B echo)",
             "samples": [{"round": r, "rtt_p50_us": 70.0} for r in range(3)]}]}]]
        t = target(runs, "TCP ping-pong 1 B RTT p50")
        self.assertEqual(t["peer"], "qperf tcp_lat (1 B echo)")
        self.assertAlmostEqual(t["ratio"], 60 / 70)
        self.assertTrue(t["met"])

    def test_udp_needs_the_rate_and_no_more_loss(self):
        def udp(fperf_loss):
            return [{"name": "udp_1472", "rows": [
                {"label": "fperf -u (sendmmsg/recvmmsg x64)",
                 "samples": [{"round": r, "gbit_s": 10.0, "loss_pct": fperf_loss}
                             for r in range(3)]},
                {"label": "qperf udp_bw",
                 "samples": [{"round": r, "gbit_s": 9.0, "loss_pct": 1.0}
                             for r in range(3)]}]}]
        self.assertTrue(target([udp(0.0)], "UDP bulk received")["met"])
        self.assertFalse(target([udp(2.0)], "UDP bulk received")["met"])

    def test_every_target_names_rows_the_benchmark_runs(self):
        # A renamed row would otherwise drop its target from the check without a word.
        rows = {(w["name"], c.label) for w in compare.workloads() for c in w["contenders"]}
        for title, workload, fperf, peers, _, _ in compare.target_specs():
            for label in [fperf] + peers:
                self.assertIn((workload, label), rows, title)

    def test_every_fperf_row_runs_the_options_its_label_names(self):
        # The labels are the table's only description of a row: a label naming
        # "--server-cpu 1" over a run pinned to core 0 would misreport what pinning buys.
        for w in compare.workloads():
            for c in w["contenders"]:
                if not isinstance(c, compare.Fperf):
                    continue
                _, client = c.cmds(5000, 4)
                named = re.sub(r"\([^)]*\)", "", c.label).split()[1:]
                for i, word in enumerate(named):
                    if not word.startswith("-"):
                        continue
                    value = named[i + 1] if i + 1 < len(named) else None
                    at = [k for k, arg in enumerate(client) if arg == word]
                    self.assertTrue(at, f"{w['name']}: {c.label}: {word} not run")
                    if value is not None and not value.startswith("-"):
                        self.assertTrue(any(client[k + 1:k + 2] == [value] for k in at),
                                        f"{w['name']}: {c.label}: {word} {value} not run")

    def test_too_few_paired_rounds_give_no_interval(self):
        t = target([run({"fperf -t 4": [50, 52], "iperf2 -P 4": [40, 41]})],
                   "TCP bulk 4 x 32 KiB")
        self.assertIsNone(t["ci95"])


class Bidir(unittest.TestCase):
    def test_both_directions_are_added_and_cpu_counts_both_ways(self):
        doc = {"client": {
            "total": {"bytes_sent": 4_000_000_000, "sent_bits_per_second": 8e9},
            "reverse_total": {"bytes_received": 1_000_000_000,
                              "received_bits_per_second": 2e9}}}
        r = compare.fperf_bidir(compare.json.dumps(doc), cpu=10.0)
        self.assertEqual(r["gbit_s"], 10.0)
        self.assertEqual(r["cpu_s_per_gb"], 2.0)

    def test_a_document_without_the_servers_direction_is_an_error(self):
        doc = {"client": {"total": {"bytes_sent": 1, "sent_bits_per_second": 8}}}
        with self.assertRaises(compare.RunError):
            compare.fperf_bidir(compare.json.dumps(doc), cpu=1.0)


class Reap(unittest.TestCase):
    def test_a_server_reaped_elsewhere_is_not_an_error(self):
        # Popen.send_signal() reaps a server that exited just before it; reap() then
        # met ChildProcessError, which once ended a 30-minute run. Reaped before
        # reap()'s first look, and while it waits after the signal.
        for reaped_at_call in (1, 2):
            proc = subprocess.Popen(["sleep", "30"])
            real_wait4, calls = os.wait4, []

            def wait4(pid, flags):
                calls.append(flags)
                if len(calls) < reaped_at_call:
                    return real_wait4(pid, flags)
                if len(calls) == reaped_at_call:
                    os.kill(pid, signal.SIGKILL)
                    real_wait4(pid, 0)
                raise ChildProcessError(10, "No child processes")

            compare.os.wait4 = wait4
            try:
                compare.reap(proc)
            finally:
                compare.os.wait4 = real_wait4
            self.assertIsNotNone(proc.returncode)
            self.assertEqual(len(calls), reaped_at_call)

if __name__ == "__main__":
    unittest.main()
