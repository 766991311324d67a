"""scripts/mmseg_lite.py - the real mmsegmentation on mmcv-lite, for the test side.

Imported by every script that compares segtrain with mmsegmentation
(scripts/make_golden.py --mmseg, tests/model/test_mmseg_roundtrip.sh through
scripts/check_mmseg.py), run with the python of scripts/mmseg-venv (torch,
mmengine 0.10.7, mmcv-lite 2.1.0, mmsegmentation 1.2.2).

mmcv-lite has no compiled ops (mmcv.ops), and mmseg 1.2.2 imports mmcv.ops at
module level in files unrelated to these models; import_mmseg() first puts a
placeholder mmcv.ops module in sys.modules whose members raise when used
(dunder names raise AttributeError, so import machinery and hasattr work).
Nothing in site-packages is patched: a model that really needs an op fails
loudly naming it.

    build(cfg)   mmseg's EncoderDecoder built by MODELS.build from a config
                 dict like mmseg's configs/_base_/models/*_r50-d8.py, narrowed
                 by cfg["base_width"] as segtrain narrows it (see model_cfg)
    logits(m, x) eval logits at the input size: EncoderDecoder.encode_decode
                 (mmseg's own test-mode forward and resize)
"""
import re
import sys
import types


def _install_ops_placeholder():
    if "mmcv.ops" in sys.modules:
        return
    ops = types.ModuleType("mmcv.ops")
    ops.__doc__ = "placeholder: mmcv-lite has no compiled ops (scripts/mmseg_lite.py)"

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args, **kwargs):
            raise RuntimeError("mmcv.ops.%s is not available in mmcv-lite (scripts/mmseg_lite.py "
                               "installs a placeholder mmcv.ops): this model needs the full mmcv"
                               % name)
        return unavailable

    ops.__getattr__ = __getattr__
    sys.modules["mmcv.ops"] = ops


_MMSEG = None


def import_mmseg():
    """mmseg with its modules registered; raises ImportError when the venv lacks it."""
    global _MMSEG
    if _MMSEG is None:
        _install_ops_placeholder()
        import mmseg
        from mmseg.utils import register_all_modules
        register_all_modules()
        _MMSEG = mmseg
    return _MMSEG


DEPTH_BLOCKS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}


def _backbone_type(name, blocks):
    """mmseg's ResNet / ResNetV1c for segtrain's backbone name; with `blocks`
    other than the depth's, a subclass of that very class whose arch_settings
    hold those stage depths (the goldens' short networks: the same blocks,
    ResLayer, stem and forward code, fewer blocks)."""
    from mmseg.models.backbones.resnet import ResNet, ResNetV1c
    from mmseg.registry import MODELS
    depth = int(re.match(r"resnet(\d+)", name).group(1))
    base = ResNetV1c if name.endswith("v1c") else ResNet
    if blocks is None or tuple(blocks) == DEPTH_BLOCKS[depth]:
        return base.__name__, depth
    block = base.arch_settings[depth][0]
    tname = "%s_blocks%s" % (base.__name__, "".join(str(b) for b in blocks))
    if tname not in MODELS.module_dict:
        cls = type(tname, (base,), {"arch_settings": {depth: (block, tuple(blocks))}})
        MODELS.register_module(name=tname, module=cls)
    return tname, depth


def model_cfg(cfg):
    """mmseg's model config for a segtrain-style cfg: backbone (resnet18/34/
    50/101[v1c]), arch (deeplabv3 | deeplabv3plus | fcn), base_width w,
    output_stride (8: strides 1,2,1,1 dilations 1,1,2,4; 16: 1,2,2,1 and
    1,1,1,2; contract_dilation), aspp_rates (mmseg's dilations are 1 + these),
    num_classes, aux_head, head_dropout / aux_dropout, optional blocks.
    Widths as segtrain's: stem/base channels w (64 in mmseg's configs),
    head channels 8w (512), c1_in_channels = layer1's width, c1_channels
    3w/4 (48), auxiliary FCNHead on stage 3 with a quarter of its channels
    (1024 -> 256)."""
    import_mmseg()
    bb = cfg["backbone"]
    btype, depth = _backbone_type(bb, cfg.get("blocks"))
    exp = 1 if depth in (18, 34) else 4
    w, C = cfg["base_width"], cfg["num_classes"]
    strides, dils = ((1, 2, 1, 1), (1, 1, 2, 4)) if cfg["output_stride"] == 8 else \
        ((1, 2, 2, 1), (1, 1, 1, 2))
    norm = dict(type="BN", requires_grad=True)
    c4, c3 = 8 * w * exp, 4 * w * exp
    backbone = dict(type=btype, depth=depth, num_stages=4, out_indices=(0, 1, 2, 3),
                    dilations=dils, strides=strides, norm_cfg=norm, norm_eval=False,
                    style="pytorch", contract_dilation=True, stem_channels=w, base_channels=w)
    arch = cfg.get("arch", "deeplabv3")
    hd = cfg.get("head_dropout", 0.0)
    common = dict(in_channels=c4, in_index=3, channels=8 * w, dropout_ratio=hd, num_classes=C,
                  norm_cfg=norm, align_corners=False)
    if arch == "fcn":
        head = dict(type="FCNHead", num_convs=2, concat_input=True, **common)
    elif arch == "deeplabv3plus":
        head = dict(type="DepthwiseSeparableASPPHead", dilations=[1] + list(cfg["aspp_rates"]),
                    c1_in_channels=w * exp, c1_channels=max(3 * w // 4, 1), **common)
    elif arch == "deeplabv3":
        head = dict(type="ASPPHead", dilations=[1] + list(cfg["aspp_rates"]), **common)
    else:
        raise ValueError("mmseg_lite: arch %r is not an mmseg model here" % arch)
    m = dict(type="EncoderDecoder", data_preprocessor=dict(type="SegDataPreProcessor"),
             backbone=backbone, decode_head=head, train_cfg=dict(), test_cfg=dict(mode="whole"))
    if cfg.get("aux_head"):
        m["auxiliary_head"] = dict(type="FCNHead", in_channels=c3, in_index=2, channels=c3 // 4,
                                   num_convs=1, concat_input=False,
                                   dropout_ratio=cfg.get("aux_dropout", 0.0), num_classes=C,
                                   norm_cfg=norm, align_corners=False,
                                   loss_decode=dict(type="CrossEntropyLoss", loss_weight=0.4))
    return m


def build(cfg):
    from mmseg.registry import MODELS
    return MODELS.build(model_cfg(cfg))


def metas(x):
    """batch_img_metas of an unpadded batch x [N, 3, H, W]"""
    hw = tuple(x.shape[2:])
    return [dict(img_shape=hw, ori_shape=hw, pad_shape=hw)] * x.shape[0]


def logits(model, x):
    """mmseg's test-mode logits of x [N, 3, H, W] (already normalised):
    EncoderDecoder.encode_decode, which resizes to img_shape."""
    return model.encode_decode(x, metas(x))


def resize(*args, **kwargs):
    """mmseg.models.utils.resize"""
    from mmseg.models.utils import resize as mm_resize
    return mm_resize(*args, **kwargs)


def train_logits(model, x):
    """{"out", "aux"} as mmseg's loss path sees them: extract_feat, each
    head's forward, resized to the input (mmseg's resize, the head's
    align_corners) - the logits its CrossEntropyLoss compares with labels."""
    feats = model.extract_feat(x)
    size = x.shape[2:]
    res = {"out": resize(model.decode_head(feats), size=size, mode="bilinear",
                         align_corners=model.decode_head.align_corners)}
    if model.with_auxiliary_head:
        res["aux"] = resize(model.auxiliary_head(feats), size=size, mode="bilinear",
                            align_corners=model.auxiliary_head.align_corners)
    return res
