#!/usr/bin/env python3
"""Writes tests/fixtures/data_aug_golden.h: mmsegmentation's own
PhotoMetricDistortion, RandomCrop(cat_max_ratio) and the composition
RandomCrop -> RandomFlip -> PhotoMetricDistortion on small images, with their
random draws forced (numpy.random replaced by scripted answers), for
tests/data/test_augment.c, which applies segtrain's transforms with the same
draws and compares.

Needs mmsegmentation 1.x with mmcv (mmcv-lite will do: mmcv.ops is replaced
by a placeholder before mmseg is imported) and opencv-python:
    PY tests/data/make_aug_golden.py            # rewrites the fixture
    PY tests/data/make_aug_golden.py --check F  # regenerates, compares with F
    PY tests/data/make_aug_golden.py --check-hsv D  # D: test_data_augment --dump-hsv
--check exits 0 when the inputs and draws equal F's and every output pixel
is within one grey level (OpenCV's HSV -> BGR rounds its row tails and, built
without FMA, its vector loop differently), 1 otherwise naming the first
difference. --check-hsv compares segtrain's 8-bit RGB <-> HSV conversions
on every input (D) with OpenCV's cvtColor: RGB -> HSV equal, HSV -> RGB
within one grey level (equal with OpenCV's vector loop on x86 with FMA; the
count that differs is printed). Images are RGB here and in the fixture;
mmseg gets them as BGR.
"""
import os
import re
import sys
import types


def placeholder_mmcv_ops():
    ops = types.ModuleType("mmcv.ops")

    def getattr_(name):
        if name.startswith("__"):
            raise AttributeError(name)

        def f(*a, **k):
            raise RuntimeError("mmcv.ops.%s is not available in mmcv-lite" % name)
        return f
    ops.__getattr__ = getattr_
    sys.modules["mmcv.ops"] = ops


placeholder_mmcv_ops()
import numpy as np  # noqa: E402
import mmcv  # noqa: E402,F401
import mmseg  # noqa: E402
import mmseg.datasets.transforms.transforms as T  # noqa: E402

IGNORE = 255


class Scripted:
    """Stands in for numpy.random in mmseg's transforms: answers each call
    with the next scripted value, checking that the call is the one expected."""

    def __init__(self, answers):
        self.answers = list(answers)

    def _next(self, kind, args):
        if not self.answers:
            raise AssertionError("unexpected draw %s%r" % (kind, args))
        k, a, v = self.answers.pop(0)
        if k != kind or tuple(a) != tuple(args):
            raise AssertionError("draw %s%r, expected %s%r" % (kind, args, k, a))
        return v

    def randint(self, *args):
        return self._next("randint", args)

    def uniform(self, *args):
        return self._next("uniform", args)

    def done(self):
        if self.answers:
            raise AssertionError("draws left unused: %r" % self.answers)


def photo_script(p, d):
    """The calls PhotoMetricDistortion makes for draws d, in its order."""
    s = [("randint", (2,), d["brightness"])]
    if d["brightness"]:
        s.append(("uniform", (-p["brightness_delta"], p["brightness_delta"]), d["beta"]))
    s.append(("randint", (2,), d["contrast_first"]))
    contrast = [("randint", (2,), d["contrast"])]
    if d["contrast"]:
        contrast.append(("uniform", tuple(p["contrast_range"]), d["contrast_alpha"]))
    if d["contrast_first"]:
        s += contrast
    s.append(("randint", (2,), d["saturation"]))
    if d["saturation"]:
        s.append(("uniform", tuple(p["saturation_range"]), d["saturation_alpha"]))
    s.append(("randint", (2,), d["hue"]))
    if d["hue"]:
        s.append(("randint", (-p["hue_delta"], p["hue_delta"]), d["hue_shift"]))
    if not d["contrast_first"]:
        s += contrast
    return s


def photometric(p, d, rgb):
    t = T.PhotoMetricDistortion(**p)
    saved = T.random
    T.random = Scripted(photo_script(p, d))
    try:
        out = t.transform({"img": rgb[:, :, ::-1].copy()})["img"]
        T.random.done()
    finally:
        T.random = saved
    return out[:, :, ::-1]


def random_crop(crop, ratio, img, seg, cand):
    """mmseg's RandomCrop with its np.random.randint answering cand's
    offsets in turn; returns the chosen bbox and the draws used."""
    t = T.RandomCrop(crop, cat_max_ratio=ratio, ignore_index=IGNORE)
    queue = [v for yx in cand for v in yx]
    used = [0]

    def randint(lo, hi):
        v = queue.pop(0)
        assert lo <= v < hi, (lo, v, hi)
        used[0] += 1
        return v
    saved = np.random.randint
    np.random.randint = randint
    try:
        box = t.crop_bbox({"img": img, "gt_seg_map": seg})
    finally:
        np.random.randint = saved
    return box, used[0] // 2


def pipeline(crop, ratio, flip, p, d, img, seg, cand):
    """RandomCrop -> RandomFlip -> PhotoMetricDistortion, as mmseg's
    Cityscapes train pipeline (after the resize)."""
    box, _ = random_crop(crop, ratio, img, seg, cand)
    y1, y2, x1, x2 = box
    r = {"img": img[y1:y2, x1:x2, ::-1].copy(), "gt_seg_map": seg[y1:y2, x1:x2].copy(),
         "seg_fields": ["gt_seg_map"]}
    if flip:
        r = T.RandomFlip(prob=1.0, direction="horizontal").transform(r)
    out = photometric(p, d, r["img"][:, :, ::-1])
    return out, r["gt_seg_map"]


def c_bytes(name, values):
    """uint8 values as a string of hex digit pairs (aug_hex in the C test)."""
    h = "".join("%02x" % v for v in values)
    rows = [h[i:i + 96] for i in range(0, len(h), 96)]
    return "static const char %s[] =\n    \"%s\";" % (name, '"\n    "'.join(rows))


PHOTO = dict(brightness_delta=32, contrast_range=(0.5, 1.5), saturation_range=(0.5, 1.5),
             hue_delta=18)
DRAW_KEYS = ["brightness", "beta", "contrast_first", "contrast", "contrast_alpha", "saturation",
             "saturation_alpha", "hue", "hue_shift"]


def D(b, beta, cf, c, ca, s, sa, h, hs):
    return dict(zip(DRAW_KEYS, [b, beta, cf, c, ca, s, sa, h, hs]))


# Every step alone, both contrast positions, extremes that clip and a hue
# shift that wraps below 0 and above 179.
PHOTO_CASES = [
    D(1, 23.7, 0, 0, 1.0, 0, 1.0, 0, 0),
    D(1, -31.2, 1, 0, 1.0, 0, 1.0, 0, 0),
    D(0, 0.0, 1, 1, 1.37, 0, 1.0, 0, 0),
    D(0, 0.0, 0, 1, 0.61, 0, 1.0, 0, 0),
    D(0, 0.0, 0, 0, 1.0, 1, 1.43, 0, 0),
    D(0, 0.0, 0, 0, 1.0, 1, 0.52, 0, 0),
    D(0, 0.0, 0, 0, 1.0, 0, 1.0, 1, -18),
    D(0, 0.0, 0, 0, 1.0, 0, 1.0, 1, 17),
    D(1, 11.3, 1, 1, 1.21, 1, 0.77, 1, -5),
    D(1, -7.9, 0, 1, 0.83, 1, 1.31, 1, 9),
]


def photo_image(rng):
    """2x64 RGB: random colours, plus greys, primaries, black and white. Rows
    of 64 pixels: OpenCV converts HSV -> BGR in vector blocks of up to 64
    pixels and rounds the rest of a row differently (as mmseg's 512- and
    1024-wide crops are converted)."""
    img = rng.integers(0, 256, size=(2, 64, 3), dtype=np.uint8)
    special = [(0, 0, 0), (255, 255, 255), (128, 128, 128), (255, 0, 0), (0, 255, 0),
               (0, 0, 255), (255, 255, 0), (0, 255, 255), (255, 0, 255), (1, 2, 3),
               (250, 5, 130), (17, 200, 199)]
    for i, c in enumerate(special):
        img[0, i] = c
    return img


def crop_mask(rng):
    """24x32 labels: a large class 0 background, blocks of classes 1..3, an
    ignore block and a block of class 7 alone."""
    m = np.zeros((24, 32), np.uint8)
    m[2:10, 3:11] = 1
    m[12:20, 14:20] = 2
    m[14:22, 24:30] = 3
    m[0:8, 20:32] = IGNORE
    m[18:24, 0:10] = 7
    return m


def crop_image():
    """24x32 RGB, pixel byte i = (i * 37) % 251 (the C test builds the same)."""
    return (np.arange(24 * 32 * 3) * 37 % 251).astype(np.uint8).reshape(24, 32, 3)


CROP = (8, 10)
# Candidate origins (y, x) per case: 11 each; which are taken depends on mmseg.
CROP_CASES = [
    (0.75, [(2, 3)] + [(0, 0)] * 10),                 # mixed: the first passes
    (0.75, [(0, 22), (16, 0), (5, 12), (13, 14)] + [(1, 1)] * 7),  # ignore+1 class, 1 class
    (0.75, [(16, 0)] * 10 + [(3, 21)]),               # all fail: the 11th, untested
    (0.5, [(10, 12), (12, 14), (13, 20)] + [(0, 0)] * 8),
    (0.9, [(0, 0), (2, 3)] + [(4, 4)] * 9),
    (1.0, [(7, 9)] + [(0, 0)] * 10),                  # off: one draw
]
# Whole pipeline on a 12x80 image, 4x64 crops (rows of 64 pixels, as
# above): (cat_max_ratio, flip, photometric case index, candidates).
PIPE_SIZE = (12, 80)
PIPE_CROP = (4, 64)
PIPE_CASES = [
    (0.75, 1, 8, [(0, 0), (6, 16), (6, 0)] + [(0, 0)] * 8),
    (0.75, 0, 9, [(2, 16), (8, 10)] + [(0, 0)] * 9),
]


def pipe_image():
    """12x80 RGB, pixel byte i = (i * 37) % 251 (the C test builds the same)."""
    return (np.arange(12 * 80 * 3) * 37 % 251).astype(np.uint8).reshape(12, 80, 3)


def pipe_mask():
    m = np.zeros(PIPE_SIZE, np.uint8)
    m[:, 60:70] = 1
    m[6:12, 0:20] = 2
    m[0:3, 70:80] = IGNORE
    return m


def generate():
    rng = np.random.default_rng(20261206)
    out = {}
    img = photo_image(rng)
    out["photo_in"] = img.reshape(-1).tolist()
    out["photo_draws"] = []
    out["photo_out"] = []
    for d in PHOTO_CASES:
        out["photo_draws"].append([d[k] for k in DRAW_KEYS])
        out["photo_out"] += photometric(PHOTO, d, img).reshape(-1).tolist()
    mask = crop_mask(rng)
    cimg = crop_image()
    out["crop_mask"] = mask.reshape(-1).tolist()
    out["crop_cases"] = []
    for ratio, cand in CROP_CASES:
        (y1, _, x1, _), n = random_crop(CROP, ratio, cimg, mask, cand)
        out["crop_cases"].append((ratio, cand, y1, x1, n))
    out["pipe_cases"] = []
    out["pipe_img"] = []
    out["pipe_mask"] = []
    out["pipe_in_mask"] = pipe_mask().reshape(-1).tolist()
    for ratio, flip, pc, cand in PIPE_CASES:
        o, m = pipeline(PIPE_CROP, ratio, flip, PHOTO, PHOTO_CASES[pc], pipe_image(), pipe_mask(),
                        cand)
        out["pipe_cases"].append((ratio, flip, pc, cand))
        out["pipe_img"] += o.reshape(-1).tolist()
        out["pipe_mask"] += m.reshape(-1).tolist()
    return out


def render(g):
    import cv2
    s = ["/* Generated by tests/data/make_aug_golden.py (mmsegmentation %s, opencv %s,"
         % (mmseg.__version__, cv2.__version__),
         " * numpy %s). Do not edit. Images RGB, HWC. */" % np.__version__,
         "#define AUG_PHOTO_H 2", "#define AUG_PHOTO_W 64",
         "#define AUG_PHOTO_N %d" % len(PHOTO_CASES),
         "#define AUG_BRIGHTNESS_DELTA %d" % PHOTO["brightness_delta"],
         "#define AUG_HUE_DELTA %d" % PHOTO["hue_delta"],
         "#define AUG_CROP_IMG_H 24", "#define AUG_CROP_IMG_W 32",
         "#define AUG_CROP_H %d" % CROP[0], "#define AUG_CROP_W %d" % CROP[1],
         "#define AUG_CROP_N %d" % len(CROP_CASES), "#define AUG_PIPE_N %d" % len(PIPE_CASES),
         "#define AUG_PIPE_IMG_H %d" % PIPE_SIZE[0], "#define AUG_PIPE_IMG_W %d" % PIPE_SIZE[1],
         "#define AUG_PIPE_H %d" % PIPE_CROP[0], "#define AUG_PIPE_W %d" % PIPE_CROP[1],
         "/* brightness, beta, contrast_first, contrast, contrast_alpha, saturation,",
         " * saturation_alpha, hue, hue_shift */",
         "static const double aug_photo_draws[][9] = {"]
    for d in g["photo_draws"]:
        s.append("    {%s}," % ", ".join("%.9g" % v for v in d))
    s.append("};")
    s.append("/* uint8 arrays as hex digit pairs; aug_photo_out: one image per case */")
    s.append(c_bytes("aug_photo_in", g["photo_in"]))
    s.append(c_bytes("aug_photo_out", g["photo_out"]))
    s.append(c_bytes("aug_crop_mask", g["crop_mask"]))
    s.append("/* cat_max_ratio, candidates (y, x) x 11, mmseg's chosen y, x, positions drawn */")
    s.append("static const struct {\n    double ratio;\n    int cand[11][2];\n    int y, x, draws;\n"
             "} aug_crop_cases[] = {")
    for ratio, cand, y, x, n in g["crop_cases"]:
        s.append("    {%.9g, {%s}, %d, %d, %d}," % (ratio, ", ".join("{%d, %d}" % c for c in cand),
                                                   y, x, n))
    s.append("};")
    s.append("/* cat_max_ratio, flip, photometric case, candidates (y, x) x 11 */")
    s.append("static const struct {\n    double ratio;\n    int flip, photo;\n    int cand[11][2];\n"
             "} aug_pipe_cases[] = {")
    for ratio, flip, pc, cand in g["pipe_cases"]:
        s.append("    {%.9g, %d, %d, {%s}}," % (ratio, flip, pc,
                                                ", ".join("{%d, %d}" % c for c in cand)))
    s.append("};")
    s.append(c_bytes("aug_pipe_in_mask", g["pipe_in_mask"]))
    s.append(c_bytes("aug_pipe_img", g["pipe_img"]))
    s.append(c_bytes("aug_pipe_mask", g["pipe_mask"]))
    return "\n".join(s) + "\n"


def parse(text):
    """name -> list of numbers of every array in a rendered fixture."""
    arrays = {}
    for m in re.finditer(r"(\w+)\[\][^=]*=\s*\{(.*?)\n\};", text, re.S):
        arrays[m.group(1)] = [float(v) for v in re.findall(r"-?[0-9.]+(?:e-?\d+)?", m.group(2))]
    for m in re.finditer(r"char (\w+)\[\] =((?:\s*\"[0-9a-f]*\")+);", text):
        h = "".join(re.findall(r"[0-9a-f]+", m.group(2)))
        arrays[m.group(1)] = [int(h[i:i + 2], 16) for i in range(0, len(h), 2)]
    return arrays


def check(path):
    want = parse(open(path).read())
    got = parse(render(generate()))
    if sorted(want) != sorted(got):
        print("fixture %s has arrays %s, the generator %s" % (path, sorted(want), sorted(got)))
        return 1
    for name in got:
        a, b = want[name], got[name]
        if len(a) != len(b):
            print("%s: %s has %d values, mmseg now gives %d" % (name, path, len(a), len(b)))
            return 1
        tol = 1 if name in ("aug_photo_out", "aug_pipe_img") else 0
        for i, (x, y) in enumerate(zip(a, b)):
            if abs(x - y) > tol:
                print("%s[%d]: %s has %g, mmseg now gives %g (tolerance %d)"
                      % (name, i, path, x, y, tol))
                return 1
    print("%s agrees with mmsegmentation %s (outputs within 1)" % (path, mmseg.__version__))
    return 0


def check_hsv(path):
    import cv2
    d = np.fromfile(path, np.uint8)
    n1, n2 = 1 << 24, 180 << 16
    if d.size != 3 * (n1 + n2):
        print("%s holds %d bytes, want %d" % (path, d.size, 3 * (n1 + n2)))
        return 1
    i = np.arange(n1, dtype=np.uint32)
    x = np.stack([(i >> 16) & 255, (i >> 8) & 255, i & 255], -1).astype(np.uint8)
    # rows of 4096 pixels: OpenCV's vector loop, as for mmseg's crops
    hsv = cv2.cvtColor(x[:, ::-1].reshape(4096, 4096, 3).copy(), cv2.COLOR_BGR2HSV)
    ours = d[:3 * n1].reshape(-1, 3)
    bad = np.nonzero((hsv.reshape(-1, 3) != ours).any(1))[0]
    if bad.size:
        k = bad[0]
        print("RGB %s -> HSV: segtrain %s, OpenCV %s (%d colours differ)"
              % (x[k].tolist(), ours[k].tolist(), hsv.reshape(-1, 3)[k].tolist(), bad.size))
        return 1
    y = x[:n2]
    rgb = cv2.cvtColor(y.reshape(-1, 4096, 3), cv2.COLOR_HSV2BGR).reshape(-1, 3)[:, ::-1]
    ours = d[3 * n1:].reshape(-1, 3)
    diff = np.abs(rgb.astype(int) - ours).max(1)
    if diff.max() > 1:
        k = int(np.argmax(diff))
        print("HSV %s -> RGB: segtrain %s, OpenCV %s" % (y[k].tolist(), ours[k].tolist(),
                                                         rgb[k].tolist()))
        return 1
    print("RGB -> HSV equal to OpenCV %s on all %d colours; HSV -> RGB within 1 on all %d "
          "(%d differ by 1)" % (cv2.__version__, n1, n2, int((diff > 0).sum())))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "--check-hsv":
        sys.exit(check_hsv(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit("usage: make_aug_golden.py [--check FIXTURE | --check-hsv DUMP]")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                        "data_aug_golden.h")
    with open(path, "w") as f:
        f.write(render(generate()))
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
