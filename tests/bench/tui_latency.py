#!/usr/bin/env python3
"""Keypress-to-screen latency of the full-screen UI while a reply streams.

Runs `ember chat` in a private tmux server, starts a long reply, then types one character at a
time and measures how long it takes until `tmux capture-pane` shows it in the input box. The
figure includes tmux's own delivery and capture overhead (a few ms), so it is an upper bound on
what the UI adds. Prints one JSON object.

Usage: tests/bench/tui_latency.py [--ember build/app/ember] [--model PATH] [--samples 40]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ember", default=os.path.join(ROOT, "build", "app", "ember"))
    parser.add_argument("--model",
                        default=os.path.join(ROOT, "..", "shared", "fixtures", "arch", "qwen2",
                                             "qwen2.gguf"))
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tmux not found")

    socket = "ember-latency-%d" % os.getpid()
    workdir = tempfile.mkdtemp(prefix="ember-latency-")

    def tmux(*cmd):
        return subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", *cmd],
                              capture_output=True, text=True).stdout

    def screen():
        return tmux("capture-pane", "-p", "-t", "t")

    def wait_for(predicate, seconds=20.0):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            s = screen()
            if predicate(s):
                return s
            time.sleep(0.01)
        raise SystemExit("timed out; screen:\n" + screen())

    command = ("env LANG=C.UTF-8 XDG_DATA_HOME=%s %s chat -m %s --no-db -t %d -n 100000 "
               "--ignore-eos -c 4096" % (workdir, args.ember, args.model, args.threads))
    tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", "t", command)
    samples = []
    try:
        wait_for(lambda s: "» Type a message" in s)
        tmux("send-keys", "-t", "t", "-l", "Tell me a long story")
        tmux("send-keys", "-t", "t", "Enter")
        wait_for(lambda s: "replying " in s)
        typed = ""
        letters = "abcdefghijklmnopqrstuvwxyz"
        while len(samples) < args.samples:
            if len(typed) >= 60:  # keep the input on one row
                tmux("send-keys", "-t", "t", "C-u")
                wait_for(lambda s: "» Esc stops the reply" in s or "» Type a message" in s)
                typed = ""
            key = letters[len(samples) % len(letters)]
            start = time.monotonic()
            tmux("send-keys", "-t", "t", "-l", key)
            typed += key
            s = wait_for(lambda s: ("» " + typed) in s, 5.0)
            elapsed_ms = (time.monotonic() - start) * 1000.0
            if "replying " in s:
                samples.append(elapsed_ms)
            else:
                # The reply ended: clear the input and start another one.
                tmux("send-keys", "-t", "t", "C-u")
                typed = ""
                tmux("send-keys", "-t", "t", "-l", "/regen")
                tmux("send-keys", "-t", "t", "Enter")
                wait_for(lambda s: "replying " in s)
            time.sleep(0.02)
    finally:
        tmux("kill-server")
        shutil.rmtree(workdir, ignore_errors=True)

    samples.sort()
    print(json.dumps({
        "keypress_to_screen_ms_median": round(statistics.median(samples), 2),
        "keypress_to_screen_ms_p90": round(samples[int(0.9 * (len(samples) - 1))], 2),
        "keypress_to_screen_ms_max": round(samples[-1], 2),
        "samples": len(samples),
        "model": os.path.basename(args.model),
        "threads": args.threads,
    }))


if __name__ == "__main__":
    main()
