#!/usr/bin/env python3
"""tests/io/make_hostile.py OUTDIR [CHECKPOINT] - writes the hostile and the
borderline-valid inputs of tests/io/test_hostile_inputs.sh (Python's
standard library only, a few hundred KB in all; nothing is committed):

  forged.jpg        a baseline JPEG whose header says 8192x8192 but whose
                    data codes 16x16 (4 blocks)
  early_end.jpg     a 256x256 baseline JPEG whose data stops at a marker
                    after half its blocks ("premature end of data segment")
  flat8192.jpg      a valid flat 8192x8192 grey baseline JPEG at the fewest
                    bits a Huffman JPEG can take (2 per block: 256 KB)
  scans.jpg         a valid-looking 8192x8192 progressive JPEG: one DC scan,
                    then 3000 AC scans of end-of-band runs (a few hundred KB)
  big.png           an 8192x8192 grey PNG, flat (2^26 pixels, 64 KB)
  torch_zip.pth     a torch.save zip archive (starts "PK\\3\\4")
  torch_legacy.pth  a legacy torch.save pickle (starts 0x80 0x02)
  nested.pth        a zip whose data.pkl nests 10^6 lists
  nested300.pth     the same with 300 levels
  nan.pth           tests/fuzz/corpus/pth/small.pth with a NaN in its first
                    float32 storage
  mmseg.py          an mmsegmentation Python config
  nan.safetensors   weights whose encoder.conv1.weight is all NaN
  ck_nan.safetensors / ck_inf.safetensors  CHECKPOINT with one weight set to
                    NaN / -Inf (when CHECKPOINT is given)
"""
import io
import json
import os
import struct
import sys
import zipfile
import zlib


def seg(marker, payload):
    return b"\xff" + bytes([marker]) + struct.pack(">H", len(payload) + 2) + payload


def jpeg_head(h, w, sof=0xC0, ac_symbol=0x00):
    """SOI, a flat quantisation table, SOFn (one grey component), a DC table
    whose only symbol is 0 (code '0') and an AC table whose only symbol is
    ac_symbol (code '0')."""
    out = b"\xff\xd8"
    out += seg(0xDB, b"\x00" + bytes([1] * 64))
    out += seg(sof, b"\x08" + struct.pack(">HH", h, w) + b"\x01" + b"\x01\x11\x00")
    bits = bytes([1] + [0] * 15)
    out += seg(0xC4, b"\x00" + bits + b"\x00")  # DC table 0: symbol 0
    out += seg(0xC4, b"\x10" + bits + bytes([ac_symbol]))  # AC table 0
    return out


def sos(ss, se, ah_al=0):
    return seg(0xDA, b"\x01" + b"\x01\x00" + bytes([ss, se, ah_al]))


def baseline_flat(h, w, data_blocks=None):
    """A flat grey baseline JPEG: each block is DC difference 0 ('0') and
    end of block ('0'), 2 bits; data_blocks < all: the data stops early."""
    blocks = ((h + 7) // 8) * ((w + 7) // 8)
    n = blocks if data_blocks is None else data_blocks
    data = bytes((2 * n + 7) // 8)
    return jpeg_head(h, w) + sos(0, 63) + data + b"\xff\xd9"


def progressive_many_scans(h, w, scans):
    """A DC scan (1 bit per block), then `scans` AC scans coded as runs of
    16384 empty blocks each (symbol 0xE0: EOBRUN 2^14 + 14 extra bits)."""
    blocks = ((h + 7) // 8) * ((w + 7) // 8)
    out = jpeg_head(h, w, sof=0xC2, ac_symbol=0xE0)
    out += sos(0, 0) + bytes((blocks + 7) // 8)
    runs = (blocks + 16383) // 16384
    ac = bytes((runs * 15 + 7) // 8)
    for _ in range(scans):
        out += sos(1, 63) + ac
    return out + b"\xff\xd9"


def png_grey(h, w):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    raw = zlib.compressobj(9)
    row = bytes(1 + w)
    body = b"".join(raw.compress(row) for _ in range(h)) + raw.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", body) + chunk(b"IEND", b""))


def torch_zip(pickle_bytes):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def nested_lists(depth):
    return b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."


def safetensors(tensors):
    """tensors: [(name, shape, float bytes)]"""
    header, off, data = {}, 0, b""
    for name, shape, raw in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def poison_pth(src, dst, entry_suffix, value):
    """A copy of torch zip src whose entry ending in entry_suffix (a float32
    storage) starts with value."""
    zin = zipfile.ZipFile(src)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith(entry_suffix):
                data = struct.pack("<f", value) + data[4:]
            z.writestr(info, data)
    open(dst, "wb").write(buf.getvalue())


def poison(src, dst, value):
    """A copy of safetensors file src with the first element of its first F32
    tensor whose name holds 'conv' set to value."""
    b = bytearray(open(src, "rb").read())
    hlen = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + hlen])
    name = next(k for k, v in hdr.items() if k != "__metadata__" and "conv" in k and
                v["dtype"] == "F32")
    at = 8 + hlen + hdr[name]["data_offsets"][0]
    b[at:at + 4] = struct.pack("<f", value)
    open(dst, "wb").write(bytes(b))
    return name


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def put(name, data):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)

    forged = bytearray(baseline_flat(16, 16))
    sof = forged.index(b"\xff\xc0")
    forged[sof + 5:sof + 9] = struct.pack(">HH", 8192, 8192)
    put("forged.jpg", bytes(forged))
    put("early_end.jpg", baseline_flat(256, 256, data_blocks=512))
    put("flat8192.jpg", baseline_flat(8192, 8192))
    put("scans.jpg", progressive_many_scans(8192, 8192, 3000))
    put("big.png", png_grey(8192, 8192))
    put("torch_zip.pth", torch_zip(b"\x80\x02}q\x00."))
    put("torch_legacy.pth", b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.")
    put("nested.pth", torch_zip(nested_lists(10 ** 6)))
    put("nested300.pth", torch_zip(nested_lists(300)))
    put("mmseg.py", b"_base_ = ['../_base_/models/deeplabv3_r50-d8.py']\n"
        b"model = dict(decode_head=dict(num_classes=19))\n")
    put("nan.safetensors",
        safetensors([("encoder.conv1.weight", [8, 3, 7, 7], struct.pack("<f", float("nan")) *
                      (8 * 3 * 7 * 7))]))
    here = os.path.dirname(os.path.abspath(__file__))
    poison_pth(os.path.join(here, "..", "fuzz", "corpus", "pth", "small.pth"),
               os.path.join(out, "nan.pth"), "/data/0", float("nan"))
    if len(sys.argv) > 2:
        name = poison(sys.argv[2], os.path.join(out, "ck_nan.safetensors"), float("nan"))
        poison(sys.argv[2], os.path.join(out, "ck_inf.safetensors"), float("-inf"))
        print(name)


if __name__ == "__main__":
    main()
