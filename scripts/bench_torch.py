#!/usr/bin/env python3
"""PyTorch side of segtrain's benchmark: the same training step in torchvision.

Runs DeepLabV3 training steps (forward, CE(out) + aux_weight * CE(aux) with
ignore_index 255, backward, SGD step) on synthetic batches held in memory, like
`segtrain bench` does, and prints img/s and the median step time. For resnet50
and resnet101 it uses torchvision's own deeplabv3_resnet50/101 builders, for
mobilenet_v3_large its deeplabv3_mobilenet_v3_large / lraspp_mobilenet_v3_large.

Run with a Python that has torch and torchvision (here: Debian's /usr/bin/python3,
torch 1.13, or a newer PyTorch in a venv). --dtype bf16 runs the step under
torch.autocast(bfloat16) (PyTorch AMP: convolutions in bf16, master weights
and the optimizer in fp32; segtrain's train.precision bf16); --channels-last
puts the model and input in NHWC: the default on the CPU, where PyTorch's
oneDNN convolutions (dilated ones most of all) are much faster in it than in
NCHW (--no-channels-last for NCHW), and PyTorch's recommended layout for AMP
on GPUs (off by default there); --compile wraps the model in torch.compile
(PyTorch 2.x; the warmup steps include the compilation, so give it >= 1);
--tf32 on|off sets torch.backends.cudnn.allow_tf32 (PyTorch's default: on,
segtrain's cudnn.allow_tf32).

--profile runs the timed steps under torch.profiler and prints the step by op
class in `segtrain bench --profile`'s format (ms per step, % of step, calls,
GFLOP/s), and the convolutions by pass and shape. Classes come from the aten
op names (a class's time is its outermost op's, children included), split by
the step's phase (forward, loss, backward, optimizer); "other" is the step's
time outside every classified op (Python, the dispatcher, autograd's engine).
PyTorch computes a conv's data and weight gradients in one op
(convolution_backward): its "conv bwd" is both. Example, the CPU job of
docs/BENCHMARKS.md ("CPU training step against PyTorch"; scripts/bench_compare
runs it with the settings resolved from configs/bench-r50-cpu.yaml):

    .venv-torch/bin/python scripts/bench_torch.py --backbone resnet50 --batch 2 \
        --crop 256 256 --classes 19 --threads 2 --iters 5 --warmup 2 --json out.json

.venv-torch is the newest PyTorch from PyPI (scripts/torch-venv); Debian's
/usr/bin/python3 with its torch runs it too.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time


def build_model(backbone, num_classes, aux, output_stride, arch="deeplabv3",
                names="torchvision"):
    from torchvision.models import resnet
    from torchvision.models.segmentation import deeplabv3, fcn

    if names == "mmseg":
        # mmseg's DeepLabV3 / FCN / DeepLabV3+ (ResNetV1c or ResNet, ASPPHead /
        # FCNHead / DepthwiseSeparableASPPHead, dropout 0.1):
        # scripts/make_golden.py's transcription at full width
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import make_golden
        blocks = {"resnet50": [3, 4, 6, 3], "resnet101": [3, 4, 23, 3],
                  "resnet50v1c": [3, 4, 6, 3], "resnet101v1c": [3, 4, 23, 3]}.get(backbone)
        if blocks is None:
            sys.exit(f"bench_torch.py: backbone {backbone}: resnet50/101(v1c) only")
        return make_golden.build({"backbone": backbone, "arch": arch, "names": "mmseg",
                                  "blocks": blocks, "base_width": 64,
                                  "output_stride": output_stride, "aspp_rates": [12, 24, 36],
                                  "num_classes": num_classes, "aux_head": int(aux),
                                  "head_dropout": 0.1, "aux_dropout": 0.1})

    if arch == "deeplabv3plus":
        sys.exit("bench_torch.py: --arch deeplabv3plus is mmseg's (--names mmseg)")
    if backbone == "mobilenet_v3_large":
        # torchvision's own deeplabv3_mobilenet_v3_large / lraspp_mobilenet_v3_large
        fn = {"deeplabv3": deeplabv3.deeplabv3_mobilenet_v3_large}.get(arch)
        if arch == "lraspp":
            from torchvision.models.segmentation import lraspp
            return lraspp.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                    num_classes=num_classes)
        if fn is None or output_stride != 16:
            sys.exit(f"bench_torch.py: mobilenet_v3_large: torchvision has deeplabv3 and "
                     "lraspp at output stride 16")
        return fn(weights=None, weights_backbone=None, num_classes=num_classes, aux_loss=aux)

    if output_stride == 8:
        rswd = [False, True, True]
    else:
        rswd = [False, False, True]
    ctor = {"resnet50": resnet.resnet50, "resnet101": resnet.resnet101}.get(backbone)
    if ctor is None:
        sys.exit(f"bench_torch.py: backbone {backbone}: torchvision's DeepLabV3 builders "
                 "support resnet50 and resnet101 (BasicBlock has no dilation)")
    bb = ctor(weights=None, replace_stride_with_dilation=rswd)
    if arch == "fcn":
        return fcn._fcn_resnet(bb, num_classes, aux)
    return deeplabv3._deeplabv3_resnet(bb, num_classes, aux)


# ---- --profile: aten ops -> segtrain's op classes ----

PHASES = {"sg::forward": "fwd", "sg::loss": "loss", "sg::backward": "bwd",
          "sg::optimizer": "optimizer"}

# (substring of the aten op name, class stem); the first match wins. A class
# gets its outermost matching op's inclusive time (its children not visited).
OP_CLASSES = [
    ("convolution_backward", "conv"), ("conv_backward", "conv"),
    # aten::conv2d only wraps aten::convolution: counting the inner op keeps a
    # conv whose wrapper lost its child link (PyTorch 1.13's profiler) single
    ("convolution", "conv"),
    ("batch_norm", "bn"),
    ("threshold_backward", "relu"), ("relu", "relu"), ("clamp_min", "relu"),
    ("max_pool2d", "maxpool"),
    ("adaptive_avg_pool2d", "avgpool"), ("aten::mean", "avgpool"),
    ("upsample_bilinear2d", "resize"), ("_upsample_bilinear2d_aa", "resize"),
    ("aten::cat", "concat"),
    ("dropout", "dropout"), ("bernoulli", "dropout"),
    ("nll_loss", "loss"), ("log_softmax", "loss"), ("cross_entropy", "loss"),
    ("aten::add", "add"),
    ("aten::copy_", "copy/cast"), ("aten::_to_copy", "copy/cast"), ("aten::to", "copy/cast"),
    ("aten::clone", "copy/cast"), ("aten::contiguous", "copy/cast"),
    ("to_dense", "copy/cast"), ("to_mkldnn", "copy/cast"),
    ("cpp_fused", "compiled fused"), ("triton_", "compiled fused"),
]


def classify(name, phase):
    if phase in ("loss", "optimizer"):
        return phase
    for key, stem in OP_CLASSES:
        if key in name:
            if stem in ("loss", "copy/cast", "compiled fused"):
                return stem
            if phase == "bwd" and stem in ("conv", "bn", "maxpool", "avgpool", "resize",
                                           "dropout", "relu") and "backward" not in name:
                # a forward op inside backward (recomputation): count it there
                return f"{stem} bwd"
            return f"{stem} {'bwd' if phase == 'bwd' or 'backward' in name else 'fwd'}"
    if phase == "bwd" and any(k in name for k in ("aten::narrow", "aten::slice", "aten::split")):
        return "concat bwd"
    return None


def _list(v):
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v]
    if isinstance(v, str) and v.startswith("["):
        return [int(x) for x in v.strip("[]").split(",") if x.strip()]
    return None


def conv_geometry(evt, backward):
    """("KHxKW sS dD CIN->COUT HxW", macs, gradients computed) from an
    aten::conv2d / convolution / convolution_backward event's shapes and
    concrete inputs (PyTorch 2.x records the stride, padding and dilation
    there; without them they print as '?' and the MACs assume stride 1 and
    'same' padding)."""
    shapes = getattr(evt, "input_shapes", None) or []
    conc = getattr(evt, "concrete_inputs", None) or []
    # conv2d: (input, weight, bias, stride, padding, dilation, groups);
    # convolution: (input, weight, bias, stride, padding, dilation, transposed,
    # output_padding, groups); convolution_backward: (grad_out, input, weight,
    # bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
    # output_mask)
    base = 1 if backward else 0
    gi = base + (6 if evt.name.endswith("conv2d") else 8)
    try:
        x, w = shapes[base], shapes[base + 1]
        n, c, h, wd = x
        k, cg, r, sk = w
    except (IndexError, ValueError, TypeError):
        return None, 0.0, 1

    def arg(i, default):
        v = _list(conc[i]) if i < len(conc) else None
        return v if v else default

    known = len(conc) > base + 5 and _list(conc[base + 3]) is not None
    half = [(r - 1) // 2, (sk - 1) // 2]
    st, pad, dil = arg(base + 3, [1, 1]), arg(base + 4, half), arg(base + 5, [1, 1])
    g = arg(gi, [1])[0] if gi < len(conc) else 1
    if len(st) == 1:
        st = st * 2
    if len(pad) == 1:
        pad = pad * 2
    if len(dil) == 1:
        dil = dil * 2
    oh = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // st[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (sk - 1) - 1) // st[1] + 1
    macs = float(n) * k * cg * r * sk * oh * ow
    s_txt = f"{st[0]}" if st[0] == st[1] else f"{st[0]}x{st[1]}"
    d_txt = f"{dil[0]}" if dil[0] == dil[1] else f"{dil[0]}x{dil[1]}"
    if not known:
        s_txt = d_txt = "?"
    geom = f"{r}x{sk} s{s_txt} d{d_txt} {c}->{k} {h}x{wd}" + (f" g{g}" if g > 1 else "")
    grads = 1
    if backward and len(conc) > base + 10 and isinstance(conc[base + 10], str):
        mask = conc[base + 10].strip("[]").replace(" ", "").split(",")
        grads = sum(1 for m in mask[:2] if m.lower() == "true") or 1
    elif backward:
        grads = 2
    return geom, macs, grads


def torch_profile(prof, iters, step_ms):
    """The profile's events -> {classes, convs} in segtrain's JSON layout, per step."""
    cls, convs = {}, {}

    def add(d, key, ms, calls=1, gflop=0.0):
        e = d.setdefault(key, {"ms": 0.0, "calls": 0, "gflop": 0.0})
        e["ms"] += ms
        e["calls"] += calls
        e["gflop"] += gflop

    def walk(evt, phase):
        name = evt.name
        if name in PHASES:
            phase = PHASES[name]
            for ch in evt.cpu_children:
                walk(ch, phase)
            return
        c = classify(name, phase) if phase else None
        if c is not None:
            found.append((evt, c))
            return
        for ch in evt.cpu_children:
            walk(ch, phase)

    found = []
    for evt in prof.events():
        if evt.cpu_parent is None:
            walk(evt, None)
    # an op inside another classified op whose parent link the profiler lost
    # (PyTorch 1.13 leaves a few parentless) is counted once, by the outer one
    found.sort(key=lambda f: (f[0].thread, f[0].time_range.start, -f[0].time_range.end))
    last_thread, last_end = None, -1
    for evt, c in found:
        tr = evt.time_range
        if evt.thread == last_thread and tr.end <= last_end:
            continue
        last_thread, last_end = evt.thread, tr.end
        name = evt.name
        ms = evt.cpu_time_total / 1e3
        gflop = 0.0
        if c.startswith("conv ") and (name.endswith("conv2d") or name.endswith("convolution") or
                                      name.endswith("convolution_backward")):
            bwd = "backward" in name
            geom, macs, grads = conv_geometry(evt, bwd)
            gflop = 2.0 * macs * (grads if bwd else 1) / 1e9
            if geom:
                add(convs, ("bwd" if bwd else "fwd", geom), ms, 1, gflop)
        add(cls, c, ms, 1, gflop)
    per = 1.0 / iters
    rows = [{"class": k, "ms": v["ms"] * per, "calls": v["calls"] * per,
             "gflop": v["gflop"] * per} for k, v in cls.items()]
    known = sum(r["ms"] for r in rows)
    rows.append({"class": "other", "ms": step_ms - known, "calls": 1.0, "gflop": 0.0})
    crow = [{"pass": k[0], "geometry": k[1], "ms": v["ms"] * per, "calls": v["calls"] * per,
             "gflop": v["gflop"] * per} for k, v in convs.items()]
    for r in rows + crow:
        r["pct"] = 100.0 * r["ms"] / step_ms if step_ms > 0 else 0.0
        if r["gflop"] > 0 and r["ms"] > 0:
            r["gflop_s"] = r["gflop"] / (r["ms"] / 1e3)
    rows.sort(key=lambda r: -r["ms"])
    crow.sort(key=lambda r: -r["ms"])
    return {"timing": "torch.profiler over the timed steps; mean per step",
            "step_ms": step_ms, "layers_ms": known, "classes": rows, "convs": crow}


def print_profile(p, iters, batch):
    """The table `segtrain bench --profile` prints (no per-op CPU time here)."""
    step = p["step_ms"] or 1.0
    print(f"  profile     ms per step, mean of {iters} timed steps, torch.profiler "
          "(a class: its outermost aten op, children included)")
    print(f"    {'op class':<28} {'ms/step':>9} {'% step':>7} {'cpu ms':>9} {'calls':>8} "
          f"{'GFLOP/s':>8}")
    total = 0.0
    for r in p["classes"]:
        total += r["ms"]
        g = f" {r['gflop_s']:8.1f}" if "gflop_s" in r else ""
        print(f"    {r['class']:<28} {r['ms']:9.1f} {100 * r['ms'] / step:6.1f}% {'-':>9} "
              f"{r['calls']:8.1f}{g}")
    print(f"    {'sum':<28} {total:9.1f} {100 * total / step:6.1f}%   (step {p['step_ms']:.1f} ms)")
    print(f"  convolutions by pass and shape (KHxKW stride dilation CIN->COUT input HxW, batch "
          f"{batch}; bwd = data + weight)")
    print(f"    {'pass':<10} {'geometry':<30} {'ms/step':>9} {'% step':>7} {'calls':>8} "
          f"{'GFLOP/s':>8}")
    for r in p["convs"]:
        print(f"    {r['pass']:<10} {r['geometry']:<30} {r['ms']:9.1f} "
              f"{100 * r['ms'] / step:6.1f}% {r['calls']:8.1f} {r.get('gflop_s', 0.0):8.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="resnet50")
    ap.add_argument("--arch", default="deeplabv3",
                    choices=["deeplabv3", "fcn", "deeplabv3plus", "lraspp"],
                    help="deeplabv3plus: mmseg's DepthwiseSeparableASPPHead (--names mmseg); "
                    "lraspp: torchvision's, on mobilenet_v3_large")
    ap.add_argument("--names", default="torchvision", choices=["torchvision", "mmseg"],
                    help="torchvision's models, or the mmseg transcription (make_golden.py)")
    ap.add_argument("--output-stride", type=int, default=8, choices=[8, 16])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--crop", type=int, nargs=2, default=[256, 256], metavar=("H", "W"))
    ap.add_argument("--classes", type=int, default=19)
    ap.add_argument("--no-aux", action="store_true")
    ap.add_argument("--aux-weight", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--channels-last", dest="channels_last", action="store_true", default=None,
                    help="model and input in NHWC (default on the CPU)")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false",
                    help="NCHW (the default on a GPU)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--profile", action="store_true",
                    help="torch.profiler over the timed steps: the step by op class")
    ap.add_argument("--tf32", default="default", choices=["default", "on", "off"],
                    help="torch.backends.cudnn.allow_tf32 (default: PyTorch's, on)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.compile and a.warmup < 1:
        sys.exit("bench_torch.py: --compile needs --warmup >= 1 (the first step compiles)")

    import torch
    import torch.nn.functional as F

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.tf32 != "default":
        torch.backends.cudnn.allow_tf32 = a.tf32 == "on"
    torch.manual_seed(0)
    dev = torch.device(a.device)
    if a.channels_last is None:
        a.channels_last = dev.type == "cpu"
    model = build_model(a.backbone, a.classes, not a.no_aux, a.output_stride, a.arch,
                        a.names).to(dev)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    if a.compile:
        if not hasattr(torch, "compile"):
            sys.exit(f"bench_torch.py: --compile needs PyTorch 2.x (this is {torch.__version__})")
        if a.profile:
            try:  # name the compiled C++ kernels in the profile ("compiled fused")
                import torch._inductor.config as inductor_config
                inductor_config.cpp.enable_kernel_profile = True
            except (ImportError, AttributeError):
                pass
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                          weight_decay=a.weight_decay)
    h, w = a.crop
    x = torch.randn(a.batch, 3, h, w, device=dev)
    if a.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (a.batch, h, w), device=dev)
    y[:, : h // 8, :] = 255  # some ignored pixels, as in real masks

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    from contextlib import nullcontext
    rf = torch.profiler.record_function if a.profile else (lambda name: nullcontext())

    def step():
        with rf("sg::optimizer"):
            opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                            enabled=(a.dtype == "bf16")):
            with rf("sg::forward"):
                out = model(x)
            with rf("sg::loss"):
                loss = F.cross_entropy(out["out"], y, ignore_index=255)
                if "aux" in out:
                    loss = loss + a.aux_weight * F.cross_entropy(out["aux"], y, ignore_index=255)
        with rf("sg::backward"):
            loss.backward()
        with rf("sg::optimizer"):
            opt.step()
        return float(loss.detach())

    t_warm = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - t_warm
    times, cpu = [], []
    prof = None
    if a.profile:
        from torch.profiler import ProfilerActivity, profile, schedule
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        # one untimed step under the profiler first (its start-up is slow),
        # then the timed steps recorded
        prof = profile(activities=acts, record_shapes=True,
                       schedule=schedule(wait=0, warmup=1, active=a.iters, repeat=1))
        prof.__enter__()
        step()
        sync()
        prof.step()
    for _ in range(a.iters):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        sync()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.__exit__(None, None, None)
    med = statistics.median(times)
    res = {
        "framework": f"pytorch {torch.__version__}",
        "backbone": a.backbone,
        "arch": a.arch,
        "names": a.names,
        "batch": a.batch,
        "crop": [h, w],
        "threads": torch.get_num_threads(),
        "device": str(dev),
        "dtype": a.dtype,
        "precision": ("autocast bf16" if a.dtype == "bf16" else "fp32")
        + (", channels_last" if a.channels_last else "")
        + (", torch.compile" if a.compile else "")
        + (", cudnn TF32 " + ("on" if torch.backends.cudnn.allow_tf32 else "off")
           if dev.type == "cuda" and a.dtype == "fp32" else ""),
        "channels_last": bool(a.channels_last),
        "compile": bool(a.compile),
        "warmup": a.warmup,
        "warmup_s": warmup_s,
        "iters": a.iters,
        "step_ms_median": med * 1000.0,
        "step_ms_min": min(times) * 1000.0,
        "step_ms_max": max(times) * 1000.0,
        "img_per_s": a.batch / med,
        # process CPU time (all threads): on a shared machine, / threads bounds
        # the uncontended step time from below
        "cpu_ms_median": statistics.median(cpu) * 1000.0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    if dev.type == "cuda":
        res["peak_device_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(f"pytorch {torch.__version__} ({res['precision']}): {res['img_per_s']:.3f} img/s, "
          f"step {res['step_ms_median']:.1f} ms median "
          f"(min {res['step_ms_min']:.1f}, max {res['step_ms_max']:.1f}), "
          f"threads {res['threads']}, peak RSS {res['peak_rss_mib']:.0f} MiB")
    if prof is not None:
        if dev.type == "cuda":
            print("bench_torch.py: --profile classifies host-side op times; on a GPU they are "
                  "launch times, not kernel times", file=sys.stderr)
        res["profile"] = torch_profile(prof, a.iters, 1e3 * statistics.mean(times))
        print_profile(res["profile"], a.iters, a.batch)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
