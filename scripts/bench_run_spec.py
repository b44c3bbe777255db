#!/usr/bin/env python3
"""`ember run` with n-gram speculation against `ember run --no-spec`, as `ember bench --spec
ngram` does for the decode loop: the real command, greedy, on high-overlap prompts (the
completion copies the prompt) and a fresh-text one (presence penalty, as the bench's
no-overlap rows). Runs alternate off/ngram so a noisy neighbour hits both alike; each row
reports the median decode speed of its repetitions, the speedup is the ratio of the medians.
Exits 1 if any pair of runs produced different ids.

    scripts/bench_run_spec.py build/app/ember MODEL.gguf [--reps 3] [-n 128] [-t 2] [--json]
"""
import argparse
import json
import statistics
import subprocess
import sys

PARAGRAPH = (
    "The committee met on Tuesday to review the budget for the coming year. After a long "
    "discussion of the costs of maintenance, staffing and new equipment, the members agreed "
    "to postpone the vote until the treasurer could present revised figures."
)
CODE = (
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
    "    return total / len(values)\n"
)
WORKLOADS = [
    ("high-overlap", PARAGRAPH + "\n\n" + PARAGRAPH + "\n\n", []),
    ("high-overlap", CODE + "\n" + CODE + "\n", []),
    (
        "no-overlap",
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        ["--presence-penalty", "4", "--repeat-last-n", "64"],
    ),
]


def run(args, prompt, extra, n=None):
    cmd = [args.ember, "run", "-m", args.model, "-p", prompt, "-n", str(n or args.n), "-t",
           str(args.threads), "--temp", "0", "--ignore-eos", "--json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ember")
    p.add_argument("model")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("-n", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows, equal = [], True
    for kind, prompt, extra in WORKLOADS:
        run(args, prompt, extra, n=8)  # warm-up: page cache
        off_tps, on_tps, on = [], [], None
        for _ in range(args.reps):
            off = run(args, prompt, extra + ["--no-spec"])
            on = run(args, prompt, extra)
            equal = equal and off["ids"] == on["ids"]
            off_tps.append(off["decode_tps"])
            on_tps.append(on["decode_tps"])
        off_med, on_med = statistics.median(off_tps), statistics.median(on_tps)
        rows.append({
            "workload": kind,
            "prompt": prompt[:40],
            "args": " ".join(extra),
            "off_tps": off_med,
            "ngram_tps": on_med,
            "speedup": on_med / off_med if off_med > 0 else 0.0,
            "acceptance_rate": on["acceptance_rate"],
            "drafted": on["spec_drafted"],
            "accepted": on["spec_accepted"],
            "off_tps_all": off_tps,
            "ngram_tps_all": on_tps,
        })
    if args.json:
        print(json.dumps({"model": args.model, "reps": args.reps, "gen_tokens": args.n,
                          "threads": args.threads, "ids_equal": equal, "rows": rows}))
    else:
        print(f"{'workload':13} {'off t/s':>8} {'ngram t/s':>9} {'speedup':>7} {'accept':>6} "
              f"{'drafted':>7}  prompt")
        for r in rows:
            print(f"{r['workload']:13} {r['off_tps']:8.2f} {r['ngram_tps']:9.2f} "
                  f"{r['speedup']:7.2f} {r['acceptance_rate']:6.2f} {r['drafted']:7d}  "
                  f"{r['prompt']!r} {r['args']}")
        print("ids of off and ngram runs equal:", "yes" if equal else "NO")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
