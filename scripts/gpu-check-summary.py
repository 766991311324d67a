#!/usr/bin/env python3
"""scripts/gpu-check-summary.py - the JSON summary of scripts/gpu-check.

Usage: gpu-check-summary.py RESULTS_TSV OUT_JSON [OUT_DIR [BENCH_DIR]]

RESULTS_TSV has one line per step: name <TAB> pass|fail|killed|not-available|not-run
<TAB> detail [<TAB> seconds]. BENCH_DIR/plan.tsv (name <TAB> cap), when present, is
the plan: every planned step is listed with its cap and status, "pending" for one
not reached yet (gpu-check rewrites the summary after every step, so a call killed
at its limit still says how far it got).
From OUT_DIR it also reads ops.log (per-op results of `test_backend_ops cuda`, and
the cases a crash ended, "exited inside this case"), and
from BENCH_DIR (default OUT_DIR) the bench JSON files: bench-segtrain.json (fp32,
TF32 allowed), bench-torch.json (PyTorch default: TF32), bench-segtrain-bf16.json,
bench-torch-bf16.json (PyTorch AMP bf16, channels_last), and the older
bench-torch-fp32.json; it writes the ratio segtrain / PyTorch img/s for each pair
measured, and segtrain's bf16 / fp32 speed-up.
Nothing is filled in that was not measured: a missing figure stays null.
Exit status 0 when no step failed, 1 otherwise. Plain python3, no packages.
"""
import datetime
import json
import os
import re
import socket
import sys


def read_results(path):
    steps = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3:
                st = {"status": parts[1], "detail": parts[2]}
                if len(parts) > 3 and parts[3]:
                    try:
                        st["seconds"] = float(parts[3])
                    except ValueError:
                        pass
                steps[parts[0]] = st
    return steps


def read_plan(path, steps):
    if not os.path.exists(path):
        return None
    plan = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 2:
                plan.append({"step": parts[0], "cap_s": int(parts[1]),
                             "status": steps.get(parts[0], {}).get("status", "pending")})
    return plan


def ops_crashes(log_path):
    """The cases a crash or fatal error ended: "  FAIL OP [CONFIG] row N ...:
    the process exited inside this case"."""
    if not os.path.exists(log_path):
        return []
    out = []
    with open(log_path, errors="replace") as f:
        for line in f:
            if "exited inside this case" in line and line.startswith("  FAIL "):
                out.append(line[len("  FAIL "):].split(": the process exited")[0].strip())
    return out


def ops_cases(log_path):
    """Per-op results from test_backend_ops' output: "OP: N cases ok" or
    "OP: F of N cases FAILED" per op, and "  FAIL OP [CONFIG] PARAMS: ERROR"
    per failure (also for a case the process died in, before any tally)."""
    if not os.path.exists(log_path):
        return None
    ops = {}

    def op(name):
        return ops.setdefault(name, {"status": "pass", "cases": None, "failed": 0,
                                     "failures": []})

    with open(log_path, errors="replace") as f:
        for line in f:
            m = re.match(r"^  FAIL (\S+) \[([^\]]*)\] (.*)$", line)
            if m:
                o = op(m.group(1))
                o["status"] = "fail"
                o["failures"].append("[%s] %s" % (m.group(2), m.group(3).strip()))
                continue
            m = re.match(r"^(\S+): (\d+) cases? ok", line)
            if m:
                op(m.group(1))["cases"] = int(m.group(2))
                continue
            m = re.match(r"^(\S+): (\d+) of (\d+) cases? FAILED", line)
            if m:
                o = op(m.group(1))
                o.update(status="fail", failed=int(m.group(2)), cases=int(m.group(3)))
    return ops


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gpu_name():
    """The GPU as gpu-check's env step saw it (GPU_CHECK_GPU): never nvidia-smi
    here, which could hang outside every step's cap."""
    return os.environ.get("GPU_CHECK_GPU") or None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    steps = read_results(sys.argv[1])
    out_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.dirname(sys.argv[2])
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(),
        "gpu": gpu_name(),
        "mode": os.environ.get("GPU_CHECK_MODE", "run"),
        "budget_s": int(os.environ.get("GPU_CHECK_BUDGET_S", "0") or 0),
        "plan": None,
        "steps": steps,
        "ops_cases": ops_cases(os.path.join(out_dir, "ops.log")),
        "ops_crashes": ops_crashes(os.path.join(out_dir, "ops.log")),
        "bench": {},
    }
    bundle_info = os.path.join(os.environ.get("SG_BUNDLE", ".device-bundle"), "BUILD-INFO")
    if os.path.exists(bundle_info):
        with open(bundle_info) as f:
            summary["bundle"] = f.read().strip().splitlines()
    bench_dir = sys.argv[4] if len(sys.argv) > 4 else out_dir
    summary["plan"] = read_plan(os.path.join(bench_dir, "plan.tsv"), steps)
    for name in ("bench-segtrain", "bench-torch", "bench-segtrain-bf16", "bench-torch-bf16",
                 "bench-torch-fp32"):
        r = load_json(os.path.join(bench_dir, name + ".json"))
        if r is not None:
            summary["bench"][name] = r
    b = summary["bench"]
    pairs = (("bench-segtrain", "bench-torch"), ("bench-segtrain-bf16", "bench-torch-bf16"),
             ("bench-segtrain", "bench-torch-fp32"), ("bench-segtrain-bf16", "bench-segtrain"))
    for a, c in pairs:
        if b.get(a, {}).get("img_per_s") and b.get(c, {}).get("img_per_s"):
            b["ratio_" + a.replace("-", "_") + "_over_" + c.replace("-", "_")] = (
                b[a]["img_per_s"] / b[c]["img_per_s"])
    failed = [k for k, v in steps.items() if v["status"] in ("fail", "killed")]
    summary["ok"] = not failed
    # written whole, then renamed: a reader (or a kill) never sees half a file
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1, sort_keys=False)
    os.replace(tmp, sys.argv[2])
    print("== gpu-check summary (%s)" % sys.argv[2])
    for k, v in steps.items():
        secs = " (%.1fs)" % v["seconds"] if "seconds" in v else ""
        print("   %-20s %-14s %s%s" % (k, v["status"], v["detail"], secs))
    for p in summary["plan"] or []:
        if p["status"] == "pending":
            print("   %-20s %-14s (cap %ds)" % (p["step"], "not reached", p["cap_s"]))
    for k, v in summary["bench"].items():
        if k.startswith("ratio"):
            print("   %s = %.3f" % (k, v))
    print("== gpu-check: %s" % ("OK" if not failed else "FAILED: " + ", ".join(failed)))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
