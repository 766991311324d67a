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
puts the model and input in NHWC (PyTorch's recommended layout for AMP on
GPUs); --tf32 on|off sets torch.backends.cudnn.allow_tf32 (PyTorch's default:
on, segtrain's cudnn.allow_tf32). Example, the CPU target row of
docs/BENCHMARKS.md:

    /usr/bin/python3 scripts/bench_torch.py --backbone resnet50 --batch 2 \
        --crop 256 256 --classes 19 --threads 2 --iters 5 --warmup 2 --json out.json
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
        # mmseg's DeepLabV3 / FCN (ResNetV1c or ResNet, ASPPHead / FCNHead,
        # dropout 0.1): scripts/make_golden.py's transcription at full width
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="resnet50")
    ap.add_argument("--arch", default="deeplabv3", choices=["deeplabv3", "fcn", "lraspp"])
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
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--tf32", default="default", choices=["default", "on", "off"],
                    help="torch.backends.cudnn.allow_tf32 (default: PyTorch's, on)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.tf32 != "default":
        torch.backends.cudnn.allow_tf32 = a.tf32 == "on"
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = build_model(a.backbone, a.classes, not a.no_aux, a.output_stride, a.arch,
                        a.names).to(dev)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
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

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                            enabled=(a.dtype == "bf16")):
            out = model(x)
            loss = F.cross_entropy(out["out"], y, ignore_index=255)
            if "aux" in out:
                loss = loss + a.aux_weight * F.cross_entropy(out["aux"], y, ignore_index=255)
        loss.backward()
        opt.step()
        return float(loss.detach())

    for _ in range(a.warmup):
        step()
    sync()
    times, cpu = [], []
    for _ in range(a.iters):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        sync()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
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
        + (", cudnn TF32 " + ("on" if torch.backends.cudnn.allow_tf32 else "off")
           if dev.type == "cuda" and a.dtype == "fp32" else ""),
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
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
