#!/usr/bin/env python3
"""scripts/check_onnx.py - check `segtrain export --format onnx` files with the
ONNX tools: onnx.checker.check_model(full_check=True), then ONNX Runtime's CPU
provider against `segtrain predict --save-logits` on the same images.

Run with the interpreter of scripts/onnx-venv (onnx, onnxruntime, numpy, PIL):

    .venv-onnx/bin/python scripts/check_onnx.py --images DIR [--images DIR2 ...] \
        MODEL.onnx [MODEL2.onnx ...] [--tol 1e-4] [--min-agree 0.9999]

Each --images DIR holds PNG images of one size and, beside each IMG.png, the
logits IMG.npy ([C,H,W] float32, predict --save-logits). For every model the
input layout (float32 NCHW normalised, or uint8 NHWC with --include-normalize)
and the output (logits or argmax labels) are read from the graph; a model is
run on every image set its fixed H/W fits, at its fixed batch, or at batch 1
and 3 when the batch is dynamic (sets of fewer images are repeated). Logits
must agree within --tol relative to the largest |logit| (max |onnx - segtrain|
/ max |segtrain|), the argmax on at least --min-agree of the pixels.

    check_onnx.py --compare A.onnx B.onnx --images DIR

runs two models on the same inputs and requires equal outputs within --tol
(the torch.onnx.export comparison).
Exit status: 0 ok, 1 mismatch or check failure, 77 when a package is missing.
"""
import argparse
import glob
import json
import os
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from PIL import Image
except ImportError as e:  # pragma: no cover - environment without the tools
    print("skip: %s (run scripts/onnx-venv, then use its python)" % e)
    sys.exit(77)


def load_set(d):
    imgs, logits = [], []
    for p in sorted(glob.glob(os.path.join(d, "*.png"))):
        imgs.append(np.asarray(Image.open(p).convert("RGB"), dtype=np.uint8))
        npy = p[:-4] + ".npy"
        logits.append(np.load(npy) if os.path.exists(npy) else None)
    if not imgs:
        raise SystemExit("FAIL: no PNG image in %s" % d)
    return imgs, logits


def meta(model):
    return {p.key: p.value for p in model.metadata_props}


def dims(vi):
    return [d.dim_value if d.HasField("dim_value") else None
            for d in vi.type.tensor_type.shape.dim]


def make_input(imgs, md, u8):
    """Batch of images in the graph's input layout; float input normalised as
    segtrain's normalize_u8: v*a + b in float32 (kernels/formulas/normalize.h)."""
    x = np.stack(imgs)  # N,H,W,3 uint8
    if u8:
        return x
    mean = np.array(json.loads(md["mean"]), dtype=np.float64)
    std = np.array(json.loads(md["std"]), dtype=np.float64)
    a = (1.0 / (255.0 * std)).astype(np.float32)
    b = (-mean / std).astype(np.float32)
    x = (x.astype(np.float32) * a).astype(np.float32) + b
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2).astype(np.float32))


def batches(n_fixed, imgs):
    sizes = [n_fixed] if n_fixed else [1, 3]
    for b in sizes:
        idx = [i % len(imgs) for i in range(b)]
        yield idx


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def check_model(path, sets, tol, min_agree):
    onnx.checker.check_model(path, full_check=True)  # path form: external data too
    model = onnx.load(path, load_external_data=False)
    md = meta(model)
    inp, out = model.graph.input[0], model.graph.output[0]
    u8 = inp.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    labels = out.name == "labels"
    d = dims(inp)
    n_fixed = d[0]
    hw = (d[1], d[2]) if u8 else (d[2], d[3])
    sess = session(path)
    ran = 0
    ok = True
    for imgs, logits in sets:
        h, w = imgs[0].shape[:2]
        if hw[0] is not None and (hw[0], hw[1]) != (h, w):
            continue
        for idx in batches(n_fixed, imgs):
            x = make_input([imgs[i] for i in idx], md, u8)
            got = sess.run(None, {inp.name: x})[0]
            for k, i in enumerate(idx):
                ref = logits[i]
                if ref is None:
                    raise SystemExit("FAIL: no logits .npy for image %d of size %dx%d" % (i, h, w))
                if labels:
                    agree = (got[k] == ref.argmax(0)).mean()
                    err = 0.0
                else:
                    if got[k].shape != ref.shape:
                        print("FAIL %s: output %s, segtrain %s" % (path, got[k].shape, ref.shape))
                        return False
                    err = np.abs(got[k] - ref).max() / max(np.abs(ref).max(), 1e-6)
                    agree = (got[k].argmax(0) == ref.argmax(0)).mean()
                good = err <= tol and agree >= min_agree
                ok = ok and good
                if not good or k == 0:
                    print("%s %s: %dx%d batch %d image %d: max rel err %.3g (tol %g), argmax "
                          "agreement %.6f%s" % ("ok" if good else "FAIL", os.path.basename(path),
                                                 h, w, len(idx), i, err, tol, agree,
                                                 " (labels)" if labels else ""))
            ran += 1
    if ran == 0:
        print("FAIL %s: no image set fits its input %s" % (path, d))
        return False
    return ok


def compare(a, b, sets, tol):
    sa, sb = session(a), session(b)
    ia, ib = sa.get_inputs()[0].name, sb.get_inputs()[0].name
    md = meta(onnx.load(a, load_external_data=False))
    ok = True
    for imgs, _ in sets:
        x = make_input(imgs[:1], md, False)
        ya, yb = sa.run(None, {ia: x})[0], sb.run(None, {ib: x})[0]
        if ya.shape != yb.shape:
            print("FAIL: %s gives %s, %s gives %s" % (a, ya.shape, b, yb.shape))
            return False
        err = np.abs(ya - yb).max() / max(np.abs(yb).max(), 1e-6)
        good = err <= tol
        ok = ok and good
        print("%s compare %s vs %s at %s: max rel err %.3g (tol %g)"
              % ("ok" if good else "FAIL", os.path.basename(a), os.path.basename(b),
                 x.shape, err, tol))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--images", action="append", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--min-agree", type=float, default=0.9999)
    ap.add_argument("--compare", nargs=2)
    a = ap.parse_args()
    sets = [load_set(d) for d in a.images]
    ok = True
    if a.compare:
        ok = compare(a.compare[0], a.compare[1], sets, a.tol)
    for m in a.models:
        ok = check_model(m, sets, a.tol, a.min_agree) and ok
    print("onnx check %s (onnx %s, onnxruntime %s)"
          % ("passed" if ok else "FAILED", onnx.__version__, ort.__version__))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
