#!/usr/bin/env python3
"""How long `ember chat` takes to end after SIGINT during a long prefill (issue 43).

Usage: scripts/stop_latency.py MODEL.gguf [--ember build/app/ember] [--trials 3]

Runs `ember chat -m MODEL -p <6,640-token prompt> --jsonl --progress -t 2 -n 4 -c 16384`,
waits for a progress event past 300 tokens, sleeps a little longer on each trial (so the stops
land at different points of a batch), sends SIGINT and times until the process has ended. Each
trial must end with exit status 130 and a "finish": "cancelled" line. Prints every trial and
the median in milliseconds. EMBER_KERNELS=avx2 in the environment measures the AVX2 path.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def one_trial(ember, model, prompt, delay, db):
    proc = subprocess.Popen(
        [ember, "chat", "-m", model, "-p", prompt, "--jsonl", "--progress", "-t", "2", "-n", "4",
         "--db", db, "-c", "16384"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    started = time.time()
    for line in proc.stdout:
        if '"progress"' in line:
            event = json.loads(line)
            done = event.get("done", event.get("progress", {}).get("done", 0))
            if done > 300:
                break
        if time.time() - started > 300:
            proc.kill()
            sys.exit("no progress past 300 tokens within 300 s")
    time.sleep(delay)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    proc.wait()
    elapsed_ms = (time.time() - sent) * 1000
    cancelled = '"cancelled"' in rest
    print(f"ended {elapsed_ms:.0f} ms after SIGINT, exit {proc.returncode}, cancelled line: {cancelled}")
    if proc.returncode != 130 or not cancelled:
        sys.exit("the stopped turn did not end as cancelled")
    return elapsed_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--ember", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                          "app", "ember"))
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    prompt = "Read these notes. " + " ".join(
        f"Item {i} is filed under {i * 7 % 13}." for i in range(600))
    with tempfile.TemporaryDirectory() as home:
        db = os.path.join(home, "stop.db")
        times = [one_trial(args.ember, args.model, prompt, 0.37 * (t + 1), db)
                 for t in range(args.trials)]
    print(f"median {statistics.median(times):.0f} ms")


if __name__ == "__main__":
    main()
