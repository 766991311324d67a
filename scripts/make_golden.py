#!/usr/bin/python3
"""scripts/make_golden.py - PyTorch golden fixtures for the model tests.

Run with Debian's python (torch 1.13, torchvision 0.14):

    /usr/bin/python3 scripts/make_golden.py [outdir=tests/fixtures]

Builds small DeepLabV3 networks from torchvision's OWN classes (ResNet._make_layer
with BasicBlock/Bottleneck, IntermediateLayerGetter, ASPP, FCNHead, DeepLabV3),
narrowed by a base width, and torchvision's deeplabv3_mobilenet_v3_large /
lraspp_mobilenet_v3_large from its own mobilenet_v3_large(width_mult, dilated=True)
and segmentation builders (heads narrowed by the base width).

    scripts/mmseg-venv && .venv-mmseg/bin/python scripts/make_golden.py --mmseg [outdir]

writes the golden_mmseg_* fixtures instead, from the real mmsegmentation
1.2.2: EncoderDecoder built by its MODELS registry from config dicts like its
configs/_base_/models/*_r50-d8.py (scripts/mmseg_lite.py), narrowed by the
base width through ResNet's stem_channels / base_channels and the heads'
channels, with shorter stages (a ResNet / ResNetV1c subclass whose
arch_settings hold fewer blocks: the same code). Each is also loaded,
strictly, into this script's transcription of mmseg (below), whose logits
must agree. Each fixture records, in one safetensors file per network:

  param/<name>   every state-dict entry before the step (segtrain names)
  input          [2,3,H,W] float32;   target [2,H,W] labels as float32 (some 255 = ignore)
  out, aux       training-mode logits (BN on batch statistics, dropout p=0)
  loss           CE(out) + aux_weight * CE(aux), ignore_index 255, mean
  grad/<name>    d loss / d parameter
  post/<name>    running_mean / running_var / num_batches_tracked after the step
  eval_out       eval-mode logits with the updated running statistics
  evalbn_loss, evalbn_grad/<name>  (basic fixture) loss and gradients with BN
                 on those running statistics (segtrain: sg_model_freeze_bn_stats)

The reference runs in float64 (weights and input are float32 values), so the
C test measures its own float32 error. Metadata holds the network options.

Also writes deeplabv3_resnet50_keys.txt: torchvision's deeplabv3_resnet50
(19 classes, aux) state-dict keys (after the segtrain prefix rename), dtypes
and shapes, plus the conv multiply-adds at 520x520 counted with hooks.
No safetensors package is needed: the format is written by hand.

    /usr/bin/python3 scripts/make_golden.py --full DIR

writes instead a full-size torchvision deeplabv3_resnet50 (torchvision names)
and an input with its eval logits into DIR, for tests/model/check_torchvision.
"""
import copy
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet, conv3x3
from torchvision.models.segmentation import deeplabv3_resnet50
from torchvision.models.segmentation.deeplabv3 import ASPP, DeepLabHead, DeepLabV3
from torchvision.models.segmentation.fcn import FCN, FCNHead
from torchvision.models.mobilenetv3 import mobilenet_v3_large
from torchvision.models.segmentation.deeplabv3 import _deeplabv3_mobilenetv3
from torchvision.models.segmentation.lraspp import LRASPPHead, _lraspp_mobilenetv3

RENAME = [("backbone.", "encoder."), ("classifier.", "decoder."), ("aux_classifier.", "aux_head."),
          ("decode_head.", "decoder."), ("auxiliary_head.", "aux_head.")]


def segtrain_name(name):
    for a, b in RENAME:
        if name.startswith(a):
            return b + name[len(a):]
    raise ValueError(name)


class DilatedBasicBlock(BasicBlock):
    """torchvision's BasicBlock refuses dilation > 1. segtrain (like
    mmsegmentation) then dilates both 3x3 convs with padding = dilation; this
    builds exactly that from torchvision's own block and conv3x3. Replacing
    the attributes keeps the module order, so state_dict names are unchanged."""

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64,
                 dilation=1, norm_layer=None):
        super().__init__(inplanes, planes, stride, downsample, groups, base_width, 1, norm_layer)
        if dilation > 1:
            self.conv1 = conv3x3(inplanes, planes, stride, dilation=dilation)
            self.conv2 = conv3x3(planes, planes, dilation=dilation)


class NarrowResNet(ResNet):
    """torchvision's ResNet with every width scaled by width/64.

    ResNet.__init__ hard-codes 64 as the stem width; this repeats its body
    with `width` and uses ResNet._make_layer unchanged (dilation rule included).
    """

    def __init__(self, block, layers, width, replace_stride_with_dilation):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes = width
        self.dilation = 1
        self.groups = 1
        self.base_width = 64
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        r = replace_stride_with_dilation
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2, dilate=r[0])
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2, dilate=r[1])
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2, dilate=r[2])
        for m in self.modules():  # ResNet's own init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


class NarrowDeepLabHead(DeepLabHead):
    """DeepLabHead with ASPP rates and inner width as parameters (torchvision
    hard-codes [12, 24, 36] and 256); same modules, same order."""

    def __init__(self, in_channels, num_classes, rates, inner):
        nn.Sequential.__init__(
            self,
            ASPP(in_channels, rates, out_channels=inner),
            nn.Conv2d(inner, inner, 3, padding=1, bias=False),
            nn.BatchNorm2d(inner),
            nn.ReLU(),
            nn.Conv2d(inner, num_classes, 1),
        )


# ---------------------------------------------------------------------------
# mmsegmentation, transcribed, for the scripts that run with Debian's python
# (torch, no mmseg: build(cfg) with names mmseg, used by
# tests/train/test_convert_torch.sh, scripts/check_export.py,
# scripts/bench_torch.py, scripts/make_pth_fixtures.py). The mmseg golden
# fixtures do NOT come from it: `make_golden.py --mmseg` builds them from the
# real mmsegmentation 1.2.2 (scripts/mmseg_lite.py, scripts/mmseg-venv) and
# checks this transcription against the real package on the way: the same
# state_dict names and shapes (strict load) and the same training and eval
# logits. These classes repeat mmseg's modules with the same attribute
# names, so their state_dict keys are mmseg's EncoderDecoder's:
#   mmcv.cnn.ConvModule(conv, norm, act) with norm_cfg BN: attributes conv,
#     bn (build_norm_layer's abbreviation for BN and SyncBN), activate (ReLU);
#     bias=False because a norm follows (bias='auto'); order conv -> bn -> act.
#   mmseg/models/backbones/resnet.py (commit 03b0197): BasicBlock.__init__
#     (conv1 3x3 stride, padding=dilation, dilation; conv2 3x3 padding=1, NOT
#     dilated), Bottleneck.__init__ with style='pytorch' (conv1 1x1, conv2
#     3x3 stride, padding=dilation, dilation, conv3 1x1; norms bn1..bn3; then
#     downsample), ResNet._make_stem_layer with deep_stem (stem = conv3x3 s2
#     stem/2, BN, ReLU, conv3x3 stem/2, BN, ReLU, conv3x3 stem, BN, ReLU),
#     maxpool 3x3 s2 p1; ResNetV1c = ResNet(deep_stem=True, avg_down=False).
#   mmseg/models/utils/res_layer.py: ResLayer (downsample = conv1x1 stride +
#     BN when stride != 1 or inplanes != planes*expansion; the first block's
#     dilation is dilation // 2 with contract_dilation and dilation > 1).
#   configs/_base_/models/deeplabv3_r50-d8.py: strides (1,2,1,1), dilations
#     (1,1,2,4), contract_dilation=True; ASPPHead(in_index 3, channels 512,
#     dilations (1,12,24,36), dropout 0.1); auxiliary FCNHead(in_index 2,
#     channels 256, num_convs 1, concat_input False, dropout 0.1, weight 0.4).
#   mmseg/models/decode_heads/decode_head.py: BaseDecodeHead creates conv_seg
#     (1x1, bias) and dropout (Dropout2d) first; cls_seg = conv_seg(dropout(x)).
#   mmseg/models/decode_heads/aspp_head.py: ASPPModule (1x1 for dilation 1,
#     else 3x3 padding=dilation), ASPPHead.image_pool = [AdaptiveAvgPool2d(1),
#     ConvModule 1x1], forward = cat([resize(image_pool(x)), *aspp(x)]) ->
#     bottleneck ConvModule 3x3 padding 1 -> cls_seg.
#   mmseg/models/decode_heads/fcn_head.py: convs (num_convs ConvModules,
#     padding k//2), conv_cat(cat([x, convs(x)])) with concat_input, cls_seg.
#   EncoderDecoder.encode_decode: resize to the input, bilinear,
#     align_corners=False.
#   mmcv/cnn/bricks/depthwise_separable_conv_module.py:
#     DepthwiseSeparableConvModule = depthwise_conv ConvModule(cin, cin, k,
#     padding, dilation, groups=cin) -> pointwise_conv ConvModule(cin, cout,
#     1), both with the module's norm and ReLU (dw/pw cfgs 'default').
#   mmseg/models/decode_heads/sep_aspp_head.py: DepthwiseSeparableASPPModule
#     (ASPPModule with every dilation > 1 branch a DepthwiseSeparableConvModule
#     3x3 padding=dilation), DepthwiseSeparableASPPHead (ASPPHead's image_pool
#     and bottleneck, a plain ConvModule 3x3 pad 1; c1_bottleneck = ConvModule(c1_in, c1, 1)
#     on inputs[0] (layer1); forward = bottleneck(cat(resize(image_pool(x)),
#     *aspp(x))) resized to c1's size, cat([out, c1]), sep_bottleneck (two
#     DSConv 3x3 pad 1), cls_seg); configs/_base_/models/deeplabv3plus_r50-d8.py
#     (channels 512, c1_in_channels 256, c1_channels 48, dilations
#     (1,12,24,36)): here channels 8 * width, c1_channels 3 * width // 4.
# ---------------------------------------------------------------------------
class ConvModule(nn.Module):
    def __init__(self, cin, cout, k, stride=1, padding=0, dilation=1, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, dilation=dilation,
                              groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.activate = nn.ReLU()

    def forward(self, x):
        return self.activate(self.bn(self.conv(x)))


class MMBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=dilation,
                               dilation=dilation, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class MMBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=dilation,
                               dilation=dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def mm_res_layer(block, inplanes, planes, num_blocks, stride, dilation):
    downsample = None
    if stride != 1 or inplanes != planes * block.expansion:
        downsample = nn.Sequential(
            nn.Conv2d(inplanes, planes * block.expansion, 1, stride=stride, bias=False),
            nn.BatchNorm2d(planes * block.expansion))
    first = dilation // 2 if dilation > 1 else dilation  # contract_dilation=True
    layers = [block(inplanes, planes, stride, first, downsample)]
    for _ in range(1, num_blocks):
        layers.append(block(planes * block.expansion, planes, 1, dilation))
    return nn.Sequential(*layers)


class MMResNet(nn.Module):
    """mmseg ResNet (deep_stem: ResNetV1c), stem/base channels = width."""

    def __init__(self, block, layers, width, deep_stem, output_stride):
        super().__init__()
        if deep_stem:
            h = max(width // 2, 1)
            self.stem = nn.Sequential(
                nn.Conv2d(3, h, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                nn.Conv2d(h, h, 3, padding=1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                nn.Conv2d(h, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        else:
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU()
        self.deep_stem = deep_stem
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        strides, dilations = ((1, 2, 1, 1), (1, 1, 2, 4)) if output_stride == 8 else \
            ((1, 2, 2, 1), (1, 1, 1, 2))
        inplanes = width
        for i in range(4):
            planes = width * 2 ** i
            self.add_module("layer%d" % (i + 1), mm_res_layer(block, inplanes, planes, layers[i],
                                                               strides[i], dilations[i]))
            inplanes = planes * block.expansion

    def forward(self, x):
        x = self.stem(x) if self.deep_stem else self.relu(self.bn1(self.conv1(x)))
        x = self.maxpool(x)
        outs = []
        for i in range(4):
            x = getattr(self, "layer%d" % (i + 1))(x)
            outs.append(x)
        return outs


class MMDecodeHead(nn.Module):
    def __init__(self, channels, num_classes, dropout):
        super().__init__()
        self.conv_seg = nn.Conv2d(channels, num_classes, 1)
        self.dropout = nn.Dropout2d(dropout) if dropout > 0 else None

    def cls_seg(self, x):
        return self.conv_seg(self.dropout(x) if self.dropout is not None else x)


class MMASPPHead(MMDecodeHead):
    def __init__(self, in_channels, channels, dilations, num_classes, dropout=0.0):
        super().__init__(channels, num_classes, dropout)
        self.image_pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), ConvModule(in_channels, channels, 1))
        self.aspp_modules = nn.ModuleList([
            ConvModule(in_channels, channels, 1 if d == 1 else 3, dilation=d,
                       padding=0 if d == 1 else d) for d in dilations])
        self.bottleneck = ConvModule((len(dilations) + 1) * channels, channels, 3, padding=1)

    def forward(self, x):
        outs = [F.interpolate(self.image_pool(x), size=x.shape[2:], mode="bilinear",
                              align_corners=False)]
        outs += [m(x) for m in self.aspp_modules]
        return self.cls_seg(self.bottleneck(torch.cat(outs, dim=1)))


class DepthwiseSeparableConvModule(nn.Module):
    def __init__(self, cin, cout, k, padding=0, dilation=1):
        super().__init__()
        self.depthwise_conv = ConvModule(cin, cin, k, padding=padding, dilation=dilation,
                                         groups=cin)
        self.pointwise_conv = ConvModule(cin, cout, 1)

    def forward(self, x):
        return self.pointwise_conv(self.depthwise_conv(x))


class MMSepASPPHead(MMDecodeHead):
    def __init__(self, in_channels, channels, dilations, c1_in_channels, c1_channels, num_classes,
                 dropout=0.0):
        super().__init__(channels, num_classes, dropout)
        self.image_pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), ConvModule(in_channels, channels, 1))
        self.aspp_modules = nn.ModuleList([
            ConvModule(in_channels, channels, 1) if d == 1 else
            DepthwiseSeparableConvModule(in_channels, channels, 3, dilation=d, padding=d)
            for d in dilations])
        # ASPPHead's bottleneck, which the subclass keeps: a plain 3x3 ConvModule
        self.bottleneck = ConvModule((len(dilations) + 1) * channels, channels, 3, padding=1)
        self.c1_bottleneck = ConvModule(c1_in_channels, c1_channels, 1)
        self.sep_bottleneck = nn.Sequential(
            DepthwiseSeparableConvModule(channels + c1_channels, channels, 3, padding=1),
            DepthwiseSeparableConvModule(channels, channels, 3, padding=1))

    def forward(self, inputs):
        x = inputs[3]
        outs = [F.interpolate(self.image_pool(x), size=x.shape[2:], mode="bilinear",
                              align_corners=False)]
        outs += [m(x) for m in self.aspp_modules]
        out = self.bottleneck(torch.cat(outs, dim=1))
        c1 = self.c1_bottleneck(inputs[0])
        out = F.interpolate(out, size=c1.shape[2:], mode="bilinear", align_corners=False)
        out = self.sep_bottleneck(torch.cat([out, c1], dim=1))
        return self.cls_seg(out)


class MMFCNHead(MMDecodeHead):
    def __init__(self, in_channels, channels, num_classes, num_convs=2, concat_input=True,
                 dropout=0.0):
        super().__init__(channels, num_classes, dropout)
        convs = [ConvModule(in_channels, channels, 3, padding=1)]
        convs += [ConvModule(channels, channels, 3, padding=1) for _ in range(num_convs - 1)]
        self.convs = nn.Sequential(*convs)
        self.concat_input = concat_input
        if concat_input:
            self.conv_cat = ConvModule(in_channels + channels, channels, 3, padding=1)

    def forward(self, x):
        out = self.convs(x)
        if self.concat_input:
            out = self.conv_cat(torch.cat([x, out], dim=1))
        return self.cls_seg(out)


class MMEncoderDecoder(nn.Module):
    """mmseg EncoderDecoder: backbone, decode_head (in_index 3), auxiliary_head
    (in_index 2); returns {"out", "aux"} resized to the input like
    torchvision's models, for the same harness."""

    def __init__(self, backbone, decode_head, auxiliary_head):
        super().__init__()
        self.backbone = backbone
        self.decode_head = decode_head
        if auxiliary_head is not None:
            self.auxiliary_head = auxiliary_head
        self.has_aux = auxiliary_head is not None

    def forward(self, x):
        feats = self.backbone(x)
        size = x.shape[2:]
        dec = self.decode_head(feats if isinstance(self.decode_head, MMSepASPPHead) else feats[3])
        res = {"out": F.interpolate(dec, size=size, mode="bilinear", align_corners=False)}
        if self.has_aux:
            res["aux"] = F.interpolate(self.auxiliary_head(feats[2]), size=size, mode="bilinear",
                                       align_corners=False)
        return res


def build_mmseg(cfg):
    bb = cfg["backbone"]
    bottleneck = bb not in ("resnet18", "resnet34")
    block = MMBottleneck if bottleneck else MMBasicBlock
    w = cfg["base_width"]
    exp = 4 if bottleneck else 1
    backbone = MMResNet(block, cfg["blocks"], w, bb.endswith("v1c"), cfg["output_stride"])
    c4, c3, C = 8 * w * exp, 4 * w * exp, cfg["num_classes"]
    hd, ad = cfg.get("head_dropout", 0.0), cfg.get("aux_dropout", 0.0)  # goldens: 0
    if cfg.get("arch", "deeplabv3") == "fcn":
        head = MMFCNHead(c4, 8 * w, C, num_convs=2, concat_input=True, dropout=hd)
    elif cfg["arch"] == "deeplabv3plus":
        head = MMSepASPPHead(c4, 8 * w, [1] + list(cfg["aspp_rates"]), w * exp,
                             max(3 * w // 4, 1), C, dropout=hd)
    else:
        head = MMASPPHead(c4, 8 * w, [1] + list(cfg["aspp_rates"]), C, dropout=hd)
    aux = MMFCNHead(c3, c3 // 4, C, num_convs=1, concat_input=False,
                    dropout=ad) if cfg["aux_head"] else None
    return MMEncoderDecoder(backbone, head, aux)


def build_mobilenet(cfg):
    """torchvision's deeplabv3_mobilenet_v3_large / lraspp_mobilenet_v3_large
    built by its own functions (mobilenet_v3_large(width_mult, dilated=True),
    _deeplabv3_mobilenetv3, _lraspp_mobilenetv3), the heads narrowed by the
    base width: DeepLabHead 4 * base_width (torchvision's 256 at 64),
    LRASPPHead inter 2 * base_width (its 128 at 64). Dropout 0."""
    w, C = cfg["base_width"], cfg["num_classes"]
    backbone = mobilenet_v3_large(weights=None, width_mult=cfg["width_mult"], dilated=True)
    if cfg["arch"] == "lraspp":
        model = _lraspp_mobilenetv3(backbone, C)
        old = model.classifier
        model.classifier = LRASPPHead(old.low_classifier.in_channels, old.cbr[0].in_channels, C,
                                      2 * w)
        return model
    model = _deeplabv3_mobilenetv3(backbone, C, bool(cfg["aux_head"]))
    c_high = model.classifier[0].convs[0][0].in_channels
    model.classifier = NarrowDeepLabHead(c_high, C, cfg["aspp_rates"], 4 * w)
    model.classifier[0].project[3].p = 0.0
    if cfg["aux_head"]:
        model.aux_classifier[3].p = 0.0
    return model


def build(cfg):
    """The network of cfg: torchvision's classes (names torchvision, the
    default) or the mmseg transcription (names mmseg); arch deeplabv3 or fcn.
    Dropout is 0 (deterministic training-mode outputs)."""
    if cfg["backbone"] == "mobilenet_v3_large":
        return build_mobilenet(cfg)
    if cfg.get("names", "torchvision") == "mmseg":
        return build_mmseg(cfg)
    bottleneck = cfg["backbone"] in ("resnet50", "resnet101")
    block = Bottleneck if bottleneck else DilatedBasicBlock
    w = cfg["base_width"]
    rsd = [False, True, True] if cfg["output_stride"] == 8 else [False, False, True]
    resnet = NarrowResNet(block, cfg["blocks"], w, rsd)
    exp = 4 if bottleneck else 1
    ret = {"layer4": "out"}
    if cfg["aux_head"]:
        ret["layer3"] = "aux"
    backbone = IntermediateLayerGetter(resnet, return_layers=ret)
    if cfg.get("arch", "deeplabv3") == "fcn":
        # torchvision fcn_resnet50/101 (segmentation/fcn.py _fcn_resnet)
        head = FCNHead(8 * w * exp, cfg["num_classes"])
        head[3].p = 0.0
        aux = None
        if cfg["aux_head"]:
            aux = FCNHead(4 * w * exp, cfg["num_classes"])
            aux[3].p = 0.0
        return FCN(backbone, head, aux)
    head = NarrowDeepLabHead(8 * w * exp, cfg["num_classes"], cfg["aspp_rates"], 4 * w)
    head[0].project[3].p = 0.0  # dropout off so training-mode outputs are deterministic
    aux = None
    if cfg["aux_head"]:
        aux = FCNHead(4 * w * exp, cfg["num_classes"])
        aux[3].p = 0.0
    return DeepLabV3(backbone, head, aux)


def randomize_bn(model, gen):
    """Non-trivial BN affine and running stats, so swapped or ignored values show."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(0.5 + torch.rand(c, generator=gen))
                m.bias.copy_(0.4 * torch.rand(c, generator=gen) - 0.2)
                m.running_mean.copy_(0.2 * torch.rand(c, generator=gen) - 0.1)
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))
                m.num_batches_tracked.fill_(3)


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, torch tensor float32/int64)."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, off = [], 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.float32:
            dt = "F32"
        elif t.dtype == torch.int64:
            dt = "I64"
        else:
            raise TypeError(name)
        b = t.numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def build_mmseg_real(cfg):
    """The real mmseg EncoderDecoder of cfg (scripts/mmseg_lite.py), its
    forward returning {"out", "aux"} at the input size like torchvision's
    models for make_fixture: in training mmseg's loss-path logits (each
    head's forward, resized), in eval its encode_decode's. Checked against the
    transcription (check_transcription) before it is returned."""
    import types
    import mmseg_lite
    model = mmseg_lite.build(cfg)

    def forward(self, x):
        if self.training:
            return mmseg_lite.train_logits(self, x)
        # EncoderDecoder.encode_decode's body (extract_feat, then the decode
        # head's predict: forward and resize to img_shape), with the
        # auxiliary head on the same features (its conv MACs are counted)
        feats = self.extract_feat(x)
        res = {"out": self.decode_head.predict(feats, mmseg_lite.metas(x), self.test_cfg)}
        if self.with_auxiliary_head:
            res["aux"] = mmseg_lite.resize(self.auxiliary_head(feats), size=x.shape[2:],
                                           mode="bilinear", align_corners=False)
        return res

    model.forward = types.MethodType(forward, model)
    check_transcription(cfg, model)
    return model


def check_transcription(cfg, real):
    """The transcription (build_mmseg) must take the real model's state_dict
    strictly and give its training and eval logits (float64, a 1e-10
    relative bound): otherwise the torch-only tests that use it would
    check segtrain against something mmseg is not."""
    real = copy.deepcopy(real).double()
    randomize_bn(real, torch.Generator().manual_seed(99))
    trans = build_mmseg(cfg).double()
    sd = real.state_dict()
    tsd = trans.state_dict()
    if list(sd) != list(tsd) or any(sd[k].shape != tsd[k].shape for k in sd):
        diff = [k for k in set(sd) ^ set(tsd)] or [k for k in sd if sd[k].shape != tsd[k].shape]
        raise SystemExit("transcription of %s %s differs from mmseg's state_dict: %s"
                         % (cfg["arch"], cfg["backbone"], sorted(diff)[:8]))
    trans.load_state_dict(sd, strict=True)
    x = torch.randn(2, 3, cfg["h"], cfg["w"], generator=torch.Generator().manual_seed(98),
                    dtype=torch.float64)
    for train in (True, False):
        real.train(train)
        trans.train(train)
        with torch.no_grad():
            a, b = real(x), trans(x)
        for k in a:
            err = ((a[k] - b[k]).abs().max() / a[k].abs().max()).item()
            if err > 1e-10:
                raise SystemExit("transcription of %s %s: %s logits (%s) differ from mmseg's "
                                 "by %.3g relative" % (cfg["arch"], cfg["backbone"], k,
                                                       "train" if train else "eval", err))
    print("transcription of %s %s = mmseg %s: %d tensors, logits equal" % (
        cfg["arch"], cfg["backbone"], __import__("mmseg").__version__, len(sd)))


def make_fixture(outdir, name, cfg, seed, evalbn=False, raw_names=False, macs=False,
                 builder=None):
    """raw_names: param/ entries keep the anchor's own state-dict names
    (mmseg's backbone./decode_head./auxiliary_head.), so the C test loads
    them through segtrain's renaming; grads and stats use segtrain names.
    builder: what builds the network (default build)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = (builder or build)(cfg)
    randomize_bn(model, gen)
    tensors = []
    for k, v in model.state_dict().items():
        tensors.append(("param/" + (k if raw_names else segtrain_name(k)), v.clone()))
    n, h, w = 2, cfg["h"], cfg["w"]
    x = torch.randn(n, 3, h, w, generator=gen)
    c = cfg["num_classes"]
    target = torch.randint(0, c, (n, h, w), generator=gen)
    target[torch.rand(n, h, w, generator=gen) < 0.15] = 255
    target[0, :3, :] = 255  # a block of ignored pixels
    tensors += [("input", x), ("target", target.float())]  # labels are exact in F32

    model = model.double()
    model.train()
    # float32 implementations can only match a float64 reference if no ReLU
    # input sits within rounding of 0 (a flipped mask reroutes a gradient):
    # record the closest one and refuse fixtures with near-ties.
    closest = [float("inf")]

    def near_zero(mod, inp):
        v = inp[0].detach().abs()
        closest[0] = min(closest[0], (v[v > 0].min() / v.max()).item() if (v > 0).any() else 1.0)

    def near_kink(mod, inp):
        # hardswish / hardsigmoid: their gradients jump at x = -3 and 3
        v = inp[0].detach()
        d = torch.minimum((v - 3).abs(), (v + 3).abs())
        closest[0] = min(closest[0], (d.min() / v.abs().max()).item())

    hooks = [mm.register_forward_pre_hook(near_zero) for mm in model.modules()
             if isinstance(mm, nn.ReLU)]
    hooks += [mm.register_forward_pre_hook(near_kink) for mm in model.modules()
              if isinstance(mm, (nn.Hardswish, nn.Hardsigmoid))]
    res = model(x.double())
    for hk in hooks:
        hk.remove()
    if closest[0] < 1e-5:
        raise SystemExit("%s: a ReLU input is %.2g x its tensor's max from 0: float32 would "
                         "flip its mask; change the seed or sizes" % (name, closest[0]))
    ce = nn.CrossEntropyLoss(ignore_index=255)
    loss = ce(res["out"], target)
    if cfg["aux_head"]:
        loss = loss + cfg["aux_weight"] * ce(res["aux"], target)
    loss.backward()
    tensors.append(("out", res["out"].detach().float()))
    if cfg["aux_head"]:
        tensors.append(("aux", res["aux"].detach().float()))
    tensors.append(("loss", loss.detach().float().reshape(1)))
    for k, p in model.named_parameters():
        tensors.append(("grad/" + segtrain_name(k), p.grad.float()))
    for k, v in model.state_dict().items():
        if k.endswith(("running_mean", "running_var")):
            tensors.append(("post/" + segtrain_name(k), v.float()))
        elif k.endswith("num_batches_tracked"):
            tensors.append(("post/" + segtrain_name(k), v.clone()))
    model.eval()
    with torch.no_grad():
        res = model(x.double())
    tensors.append(("eval_out", res["out"].float()))
    if evalbn:
        # gradients with BN on running statistics (post-step stats), as
        # segtrain's frozen BN statistics give
        model.zero_grad()
        res = model(x.double())
        loss = ce(res["out"], target)
        if cfg["aux_head"]:
            loss = loss + cfg["aux_weight"] * ce(res["aux"], target)
        loss.backward()
        tensors.append(("evalbn_loss", loss.detach().float().reshape(1)))
        for k, p in model.named_parameters():
            tensors.append(("evalbn_grad/" + segtrain_name(k), p.grad.float()))
    meta = dict(cfg)
    meta["blocks"] = ",".join(str(b) for b in cfg.get("blocks", [0, 0, 0, 0]))
    meta["aspp_rates"] = ",".join(str(r) for r in cfg["aspp_rates"])
    meta["torch"] = torch.__version__
    if builder is build_mmseg_real:
        meta["mmseg"] = __import__("mmseg").__version__
    if macs:  # multiply-accumulates of every conv at h x w, batch 1 (groups counted)
        meta["conv_macs"] = conv_macs(copy.deepcopy(model).float(), h, w)
    path = os.path.join(outdir, name)
    write_safetensors(path, tensors, meta)
    print("%s: %d tensors, %d bytes, loss %.6f, closest ReLU input to 0: %.2g x max" % (
        path, len(tensors), os.path.getsize(path), loss.item(), closest[0]))


def conv_macs(model, h, w):
    macs = [0]

    def hook(m, inp, out):
        k = m.weight.shape
        macs[0] += out.shape[0] * out.shape[1] * out.shape[2] * out.shape[3] * k[1] * k[2] * k[3]

    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 3, h, w))
    for x in hs:
        x.remove()
    return macs[0]


def write_keys(outdir):
    model = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=19, aux_loss=True)
    sd = model.state_dict()
    nparams = sum(p.numel() for p in model.parameters())
    path = os.path.join(outdir, "deeplabv3_resnet50_keys.txt")
    with open(path, "w") as f:
        f.write("# torchvision %s deeplabv3_resnet50(num_classes=19, aux_loss=True): state_dict "
                "keys renamed to segtrain prefixes, dtype, shape\n" % __import__("torchvision").__version__)
        f.write("# params %d keys %d conv_macs_520 %d\n" % (nparams, len(sd), conv_macs(model, 520, 520)))
        for k, v in sd.items():
            dt = "I64" if v.dtype == torch.int64 else "F32"
            f.write("%s %s %s\n" % (segtrain_name(k), dt, ",".join(str(s) for s in v.shape)))
    print("%s: %d keys, %d params" % (path, len(sd), nparams))


def write_full_check(outdir):
    """Full-size torchvision deeplabv3_resnet50 (19 classes, aux; random weights,
    non-trivial BN) saved with torchvision's names, plus an input and its eval
    logits, for tests/model/check_torchvision (too large to commit)."""
    torch.manual_seed(0)
    m = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=19, aux_loss=True)
    randomize_bn(m, torch.Generator().manual_seed(1))
    write_safetensors(os.path.join(outdir, "deeplabv3_resnet50_tv.safetensors"),
                      list(m.state_dict().items()), {"format": "pt"})
    x = torch.randn(1, 3, 65, 71)
    m = m.double().eval()
    with torch.no_grad():
        r = m(x.double())
    write_safetensors(os.path.join(outdir, "deeplabv3_resnet50_io.safetensors"),
                      [("input", x), ("out", r["out"].float()), ("aux", r["aux"].float())],
                      {"h": 65, "w": 71})
    print("%s: deeplabv3_resnet50_tv.safetensors, deeplabv3_resnet50_io.safetensors" % outdir)


def make_mmseg_fixtures(outdir):
    """The golden_mmseg_* fixtures, from the real mmsegmentation."""
    # mmseg DeepLabV3 R-50-D8: ResNetV1c + ASPPHead + auxiliary FCNHead (mmseg names)
    make_fixture(outdir, "golden_mmseg_r50v1c_os8_aux.safetensors", {
        "backbone": "resnet50v1c", "arch": "deeplabv3", "names": "mmseg", "blocks": [1, 1, 2, 2],
        "base_width": 4, "output_stride": 8, "aspp_rates": [2, 5], "num_classes": 5,
        "aux_head": 1, "aux_weight": 0.4, "h": 25, "w": 33}, seed=19, raw_names=True,
        builder=build_mmseg_real)
    # mmseg FCN R-18-D8 (its BasicBlock dilates conv1 only), OS 16, no aux
    make_fixture(outdir, "golden_mmseg_fcn_r18_os16.safetensors", {
        "backbone": "resnet18", "arch": "fcn", "names": "mmseg", "blocks": [1, 1, 2, 2],
        "base_width": 4, "output_stride": 16, "aspp_rates": [12, 24, 36], "num_classes": 3,
        "aux_head": 0, "aux_weight": 0.0, "h": 29, "w": 26}, seed=6, raw_names=True,
        builder=build_mmseg_real)
    # mmseg DeepLabV3+ R-50-D8: ResNetV1c + DepthwiseSeparableASPPHead + aux FCNHead
    make_fixture(outdir, "golden_mmseg_dlv3plus_r50v1c_os8_aux.safetensors", {
        "backbone": "resnet50v1c", "arch": "deeplabv3plus", "names": "mmseg",
        "blocks": [1, 1, 2, 2], "base_width": 4, "output_stride": 8, "aspp_rates": [2, 5],
        "num_classes": 5, "aux_head": 1, "aux_weight": 0.4, "h": 21, "w": 25}, seed=36,
        raw_names=True, builder=build_mmseg_real, macs=True)
    # mmseg DeepLabV3+ on its plain ResNet-50 (7x7 stem), OS 16 (the decoder
    # upsamples x4 to layer1's stride 4), a dilation-1 rate (a 1x1
    # ConvModule branch, as mmseg builds it), no aux, BN-on-running-stats grads
    make_fixture(outdir, "golden_mmseg_dlv3plus_r50_os16.safetensors", {
        "backbone": "resnet50", "arch": "deeplabv3plus", "names": "mmseg",
        "blocks": [1, 1, 2, 1], "base_width": 4, "output_stride": 16, "aspp_rates": [1, 3],
        "num_classes": 4, "aux_head": 0, "aux_weight": 0.0, "h": 29, "w": 23}, seed=62,
        evalbn=True, raw_names=True, builder=build_mmseg_real, macs=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--full":
        os.makedirs(sys.argv[2], exist_ok=True)
        write_full_check(sys.argv[2])
        return
    args = sys.argv[1:]
    mmseg = args[:1] == ["--mmseg"]
    if mmseg:
        args = args[1:]
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    outdir = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(2)
    if mmseg:
        make_mmseg_fixtures(outdir)
        return
    # bottleneck, output stride 8, aux head, small ASPP rates (taps inside the map)
    make_fixture(outdir, "golden_bottleneck_os8_aux.safetensors", {
        "backbone": "resnet50", "blocks": [1, 1, 2, 2], "base_width": 3, "output_stride": 8,
        "aspp_rates": [2, 5], "num_classes": 5, "aux_head": 1, "aux_weight": 0.5,
        "h": 25, "w": 33}, seed=1)
    # basic block, output stride 8 (dilated BasicBlocks: layer3 1/2, layer4 2/4),
    # no aux head, torchvision's rates (taps mostly in padding), BN-on-running-stats grads
    make_fixture(outdir, "golden_basic_os8.safetensors", {
        "backbone": "resnet18", "blocks": [1, 1, 2, 2], "base_width": 3, "output_stride": 8,
        "aspp_rates": [12, 24, 36], "num_classes": 4, "aux_head": 0, "aux_weight": 0.0,
        "h": 35, "w": 29}, seed=2, evalbn=True)
    # bottleneck with resnet101's layout idea (a longer layer3), output stride 16,
    # aux head, torchvision's rates, very narrow
    make_fixture(outdir, "golden_bottleneck_os16_aux.safetensors", {
        "backbone": "resnet101", "blocks": [1, 1, 3, 2], "base_width": 2, "output_stride": 16,
        "aspp_rates": [12, 24, 36], "num_classes": 3, "aux_head": 1, "aux_weight": 0.4,
        "h": 24, "w": 24}, seed=3)
    # torchvision fcn_resnet50's tree (FCNHead on layer4, aux FCNHead on layer3)
    make_fixture(outdir, "golden_fcn_r50_os8_aux.safetensors", {
        "backbone": "resnet50", "arch": "fcn", "names": "torchvision", "blocks": [1, 1, 2, 2],
        "base_width": 3, "output_stride": 8, "aspp_rates": [12, 24, 36], "num_classes": 4,
        "aux_head": 1, "aux_weight": 0.4, "h": 27, "w": 31}, seed=14)
    # torchvision's deeplabv3_mobilenet_v3_large (DeepLabHead on features[16],
    # aux FCNHead on features[4]) at width_mult 0.1: mostly 8-channel blocks,
    # so most residual joins are taken; BN-on-running-stats grads too
    make_fixture(outdir, "golden_mnv3_deeplabv3_aux.safetensors", {
        "backbone": "mobilenet_v3_large", "arch": "deeplabv3", "names": "torchvision",
        "width_mult": 0.1, "base_width": 4, "output_stride": 16, "aspp_rates": [2, 3],
        "num_classes": 4, "aux_head": 1, "aux_weight": 0.4, "h": 49, "w": 57}, seed=27,
        evalbn=True)
    # torchvision's lraspp_mobilenet_v3_large at width_mult 0.15 (inter 8)
    make_fixture(outdir, "golden_mnv3_lraspp.safetensors", {
        "backbone": "mobilenet_v3_large", "arch": "lraspp", "names": "torchvision",
        "width_mult": 0.15, "base_width": 4, "output_stride": 16, "aspp_rates": [12, 24, 36],
        "num_classes": 3, "aux_head": 0, "aux_weight": 0.0, "h": 45, "w": 39}, seed=28)
    write_keys(outdir)


if __name__ == "__main__":
    main()
