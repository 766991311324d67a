"""tests/train/test_lr_torch.py LR_DUMP - segtrain's learning rate at every
optimizer step (tests/train/lr_dump.c) against torch.optim.lr_scheduler's,
stepped once per optimizer step as torchvision's reference script does:
PolynomialLR, CosineAnnealingLR, MultiStepLR, constant; with LinearLR /
ConstantLR warmup composed by ChainedScheduler (segtrain's semantics, see
train/lr_schedule.h). With min_lr > 0 (mmseg's PolyLR, CosineAnnealingLR's
eta_min), where torch's chained recursion is not a product of closed forms,
the main schedule alone is compared with torch's and the warmup factors
with torch's warmup alone. Run with a python that has torch (Debian's
/usr/bin/python3); exits 77 without torch."""
import subprocess
import sys

try:
    import torch
    from torch.optim import lr_scheduler as L
except ImportError:
    print("skip: no torch")
    sys.exit(77)

DUMP = sys.argv[1]
BASE = 0.02


def segtrain_lrs(total, **keys):
    args = [DUMP, str(total)] + ["train.%s=%s" % (k, v) for k, v in keys.items()]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def torch_lrs(total, make, base=BASE):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base, momentum=0.9)
    sched = make(opt)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def compare(name, got, want, rel=1e-12):
    assert len(got) == len(want), (name, len(got), len(want))
    for t, (g, w) in enumerate(zip(got, want)):
        if abs(g - w) > rel * abs(w) + 1e-15:
            sys.exit("%s: step %d: segtrain lr %.17g, torch %.17g" % (name, t, g, w))
    print("ok %-40s %d steps, max |diff| %.3g" %
          (name, len(got), max(abs(g - w) for g, w in zip(got, want))))


T, W, R = 120, 17, 0.05
MS = [10, 50, 90]  # one milestone inside the warmup


def mains(eta_min):
    out = {
        "cosine": (dict(lr_schedule="cosine", min_lr=eta_min),
                   lambda o: L.CosineAnnealingLR(o, T_max=T, eta_min=eta_min)),
        "step": (dict(lr_schedule="step", lr_steps="[%s]" % ",".join(map(str, MS)),
                      lr_gamma=0.25),
                 lambda o: L.MultiStepLR(o, milestones=MS, gamma=0.25)),
        "constant": (dict(lr_schedule="constant"),
                     lambda o: L.ConstantLR(o, factor=1.0, total_iters=0)),
    }
    if eta_min == 0:  # torch's PolynomialLR has no floor
        out["poly"] = (dict(lr_schedule="poly", poly_power=0.9),
                       lambda o: L.PolynomialLR(o, total_iters=T, power=0.9))
    return out


WARM = {
    "none": (dict(warmup="none"), None),
    "linear": (dict(warmup="linear", warmup_iters=W, warmup_ratio=R),
               lambda o: L.LinearLR(o, start_factor=R, end_factor=1.0, total_iters=W)),
    "constant": (dict(warmup="constant", warmup_iters=W, warmup_ratio=R),
                 lambda o: L.ConstantLR(o, factor=R, total_iters=W)),
}

common = dict(lr=BASE, iters=T)
# min_lr = 0: the whole chain, exactly as torch composes it
for mname, (mkeys, mmake) in mains(0.0).items():
    for wname, (wkeys, wmake) in WARM.items():
        keys = dict(common, **mkeys, **wkeys)
        got = segtrain_lrs(T, **keys)
        if wmake is None:
            want = torch_lrs(T, mmake)
        else:
            want = torch_lrs(T, lambda o: L.ChainedScheduler([wmake(o), mmake(o)]))
        compare("%s + %s warmup" % (mname, wname), got, want)

# warmup_mode sequential: torch's SequentialLR([warmup, main], milestones=[W])
# with the main schedule over T - W steps, as torchvision's reference script
def mains_after(TT):
    return {
        "cosine": (dict(lr_schedule="cosine"), lambda o: L.CosineAnnealingLR(o, T_max=TT)),
        "step": (dict(lr_schedule="step", lr_steps="[%s]" % ",".join(map(str, MS)),
                      lr_gamma=0.25),
                 lambda o: L.MultiStepLR(o, milestones=MS, gamma=0.25)),
        "poly": (dict(lr_schedule="poly", poly_power=0.9),
                 lambda o: L.PolynomialLR(o, total_iters=TT, power=0.9)),
    }


for wname, (wkeys, wmake) in WARM.items():
    if wmake is None:
        continue
    for mname, (mkeys, mmake) in mains_after(T - W).items():
        keys = dict(common, **mkeys, **wkeys, warmup_mode="sequential")
        got = segtrain_lrs(T, **keys)
        want = torch_lrs(T, lambda o: L.SequentialLR(o, [wmake(o), mmake(o)], milestones=[W]))
        compare("%s + %s warmup, sequential" % (mname, wname), got, want)

# min_lr > 0: main schedule alone vs torch (poly: torchvision's LambdaLR form
# of mmseg's PolyLR), warmup factor alone vs torch's warmup on a constant
ETA = 3e-4
for mname, (mkeys, mmake) in dict(mains(ETA), poly=(
        dict(lr_schedule="poly", poly_power=0.9, min_lr=ETA),
        lambda o: L.LambdaLR(o, lambda t: ((BASE - ETA) * (1 - min(t, T) / T) ** 0.9 + ETA) / BASE),
)).items():
    keys = dict(common, **mkeys, warmup="none")
    compare("%s, min_lr %g" % (mname, ETA), segtrain_lrs(T, **keys), torch_lrs(T, mmake))
    for wname, (wkeys, wmake) in WARM.items():
        if wmake is None:
            continue
        keys = dict(common, **mkeys, **wkeys)
        got = segtrain_lrs(T, **keys)
        main = torch_lrs(T, mmake)
        factor = torch_lrs(T, wmake, base=1.0)
        compare("%s + %s warmup, min_lr %g" % (mname, wname, ETA), got,
                [m * f for m, f in zip(main, factor)])
print("lr schedules match torch", torch.__version__)
