#!/usr/bin/env python3
"""tests/train/test_tensorboard.py SEGTRAIN SRCDIR - the TensorBoard event
files of a training run, read back with an independent reader
(scripts/read_tfevents.py, standard library only) and, when the tensorboard
package is installed, with TensorBoard's own EventAccumulator.

A tiny run (6 steps, validation at 3 and 6, a leftover pass each epoch) and
its resume to 8 steps must give:
 - two event files in <run_dir>/tb (a resume appends a new one), each
   starting with file_version "brain.Event:2" and a SessionLog START at the
   step it starts from (0, then 6), every record's CRCs valid;
 - exactly the scalars of metrics.jsonl and eval/iter_<N>.json, at their
   iterations, with their values rounded to float32: train/loss, loss_main,
   loss_aux, lr, img_per_s, data_wait_s, restart; val/mIoU, mAcc, pixel_acc,
   val/iou/<class>; leftover/mIoU - nothing more, nothing missing;
 - a flipped byte is reported as a CRC mismatch (the check can fail);
 - train.tensorboard: false writes no tb directory.
"""
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

SEGTRAIN, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "scripts"))
import read_tfevents as rt  # noqa: E402


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, what):
    p = subprocess.run([SEGTRAIN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        fail("%s: exit %d:\n%s" % (what, p.returncode, p.stdout[-3000:]))
    return p.stdout


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


TRAIN_KEYS = [("loss", "train/loss"), ("loss_main", "train/loss_main"),
              ("loss_aux", "train/loss_aux"), ("lr", "train/lr"),
              ("img_per_s", "train/img_per_s"), ("data_wait_s", "train/data_wait_s"),
              ("restart", "train/restart")]
VAL_KEYS = [("val_miou", "val/mIoU"), ("val_macc", "val/mAcc"),
            ("val_pixel_acc", "val/pixel_acc")]


def expected_scalars(run_dir):
    """(tag, step) -> value from metrics.jsonl and the eval reports."""
    exp = {}

    def put(tag, step, v):
        if v is None:  # NaN in JSON; the event holds NaN
            v = float("nan")
        if (tag, step) in exp:
            fail("metrics.jsonl has %s at iteration %d twice" % (tag, step))
        exp[(tag, step)] = v

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            it = m["iter"]
            if "loss" in m:
                for k, tag in TRAIN_KEYS:
                    put(tag, it, m[k])
            if "val_miou" in m:
                for k, tag in VAL_KEYS:
                    put(tag, it, m[k])
                with open(os.path.join(run_dir, "eval", "iter_%08d.json" % it)) as e:
                    rep = json.load(e)
                for name, iou in zip(rep["classes"], rep["iou"]):
                    if iou is not None:  # an absent class has no IoU (and no scalar)
                        put("val/iou/" + name, it, iou)
            if "leftover_miou" in m:
                put("leftover/mIoU", it, m["leftover_miou"])
    return exp


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def main():
    # the CRC itself, on the standard check value of CRC-32C
    if rt.crc32c(b"123456789") != 0xE3069283:
        fail("read_tfevents.crc32c('123456789') = %08x, expected e3069283"
             % rt.crc32c(b"123456789"))
    tmp = tempfile.mkdtemp(prefix="sg_tb_")
    try:
        data, rd = os.path.join(tmp, "data"), os.path.join(tmp, "run")
        run(["synth", "--out", data, "--train", "10", "--val", "4", "--size", "48x64",
             "--seed", "3"], "synth")
        common = ["--config", os.path.join(SRC, "configs", "demo.yaml"),
                  "--set", "data.root=" + data, "--set", "threads=1",
                  "--set", "data.crop_size=[32,32]", "--set", "train.batch_size=4",
                  "--set", "data.workers=1", "--set", "train.log_every=2",
                  "--set", "train.eval_every=3", "--set", "train.checkpoint_every=3"]
        run(["train"] + common + ["--set", "run_dir=" + rd, "--set", "train.iters=6"],
            "training 6 steps")
        run(["train"] + common + ["--set", "run_dir=" + rd, "--set", "train.iters=8",
                                  "--resume", "auto"], "resuming to 8 steps")

        files = rt.event_files([os.path.join(rd, "tb")])
        if len(files) != 2:
            fail("expected 2 event files (run + resume) in %s/tb, found %s" % (rd, files))
        got = {}
        for path, start in zip(files, [0, 6]):
            name = os.path.basename(path)
            if not name.startswith("events.out.tfevents."):
                fail("event file name %s" % name)
            evs = rt.read_events(path)  # raises on any CRC or protobuf error
            if evs[0].get("file_version") != "brain.Event:2":
                fail("%s: first event %r, expected file_version brain.Event:2" % (name, evs[0]))
            if evs[1].get("session_log_status") != 1 or evs[1]["step"] != start:
                fail("%s: second event %r, expected SessionLog START at step %d"
                     % (name, evs[1], start))
            for ev in evs[2:]:
                for tag, v in ev.get("values", []):
                    if (tag, ev["step"]) in got:
                        fail("%s at step %d written twice" % (tag, ev["step"]))
                    got[(tag, ev["step"])] = v
                if ev["step"] < start:
                    fail("%s: step %d before the file's start %d" % (name, ev["step"], start))
        exp = expected_scalars(rd)
        for key in sorted(exp):
            if key not in got:
                fail("no event for %s at step %d (metrics.jsonl has %r)" % (key[0], key[1],
                                                                            exp[key]))
            if not same(got[key], f32(exp[key])):
                fail("%s at step %d: event %r, metrics.jsonl %r (float32 %r)"
                     % (key[0], key[1], got[key], exp[key], f32(exp[key])))
        extra = sorted(set(got) - set(exp))
        if extra:
            fail("events not in metrics.jsonl / eval reports: %s" % extra[:5])
        tags = {t for t, _ in exp}
        for want in ["train/loss", "train/lr", "val/mIoU", "val/mAcc", "val/pixel_acc",
                     "leftover/mIoU", "train/data_wait_s", "train/img_per_s", "train/restart"]:
            if want not in tags:
                fail("the run logged no %s" % want)
        if not any(t.startswith("val/iou/") for t in tags):
            fail("no per-class IoU scalar")
        steps = sorted({s for t, s in exp if t == "val/mIoU"})
        if steps != [3, 6, 8]:
            fail("val/mIoU at steps %s, expected [3, 6, 8]" % steps)
        print("ok: %d scalars in 2 files match metrics.jsonl and the eval reports" % len(exp))

        # a damaged byte is found (the CRC check can fail)
        bad = os.path.join(tmp, "bad.tfevents")
        blob = bytearray(open(files[0], "rb").read())
        blob[len(blob) // 2] ^= 0x10
        open(bad, "wb").write(bytes(blob))
        try:
            rt.read_events(bad)
            fail("a flipped byte in the middle of %s was not detected" % files[0])
        except rt.EventFileError as e:
            if "CRC" not in str(e):
                fail("flipped byte: unexpected error %s" % e)

        # TensorBoard's own reader, where installed
        try:
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        except ImportError:
            print("skip: the tensorboard package is not installed (its reader not tried)")
        else:
            ea = EventAccumulator(os.path.join(rd, "tb"), size_guidance={"scalars": 0})
            ea.Reload()
            tb_tags = set(ea.Tags()["scalars"])
            if tb_tags != tags:
                fail("TensorBoard sees tags %s, expected %s" % (sorted(tb_tags), sorted(tags)))
            for tag in tags:
                pts = {(tag, e.step): e.value for e in ea.Scalars(tag)}
                want = {k: v for k, v in exp.items() if k[0] == tag}
                if set(pts) != set(want) or any(not same(pts[k], f32(want[k])) for k in want):
                    fail("TensorBoard's %s: %s, expected %s" % (tag, sorted(pts.items()),
                                                               sorted(want.items())))
            print("ok: TensorBoard's EventAccumulator reads the same %d tags" % len(tags))

        # switched off: no tb directory
        off = os.path.join(tmp, "off")
        run(["train"] + common + ["--set", "run_dir=" + off, "--set", "train.iters=2",
                                  "--set", "train.tensorboard=false"], "training without TB")
        if os.path.exists(os.path.join(off, "tb")):
            fail("train.tensorboard: false still wrote %s/tb" % off)
        print("ok: train.tensorboard: false writes no events")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
