#!/usr/bin/env python3
"""scripts/read_tfevents.py - read TensorBoard event files with the standard
library only: an independent check of what io/tfevents.c writes, and a
quick look at a run without TensorBoard.

    scripts/read_tfevents.py RUN_DIR/tb [FILE...]      # "step  tag  value" lines
    scripts/read_tfevents.py --json RUN_DIR/tb          # one JSON object per event

Every record's framing is checked: uint64 length, masked CRC32C of the
length, data, masked CRC32C of the data (TFRecord). The data is decoded as a
tensorflow.Event protobuf - wall_time (1, double), step (2, int64),
file_version (3, string), summary (5: Summary, repeated Value (1) with tag (1)
and simple_value (2, float)), session_log (6: status (1)) - by a generic
protobuf wire-format walker, so unknown fields are skipped, not misread.
A damaged file stops with an error naming the file, the byte offset and what
is wrong (exit 1).

As a module: read_events(path) -> list of dicts with keys wall_time, step,
and file_version, session_log_status or values ([(tag, float), ...]).
"""
import json
import os
import struct
import sys

# ---- CRC32C (Castagnoli), as TFRecord uses it: reflected poly 0x82f63b78 ----
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class EventFileError(Exception):
    pass


# ---- protobuf wire format ----
def _varint(buf, pos):
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise EventFileError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise EventFileError("varint longer than 10 bytes")


def fields(buf):
    """Yields (field number, wire type, value) of one message: ints for
    varint, bytes for fixed64 / fixed32 / length-delimited."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
        elif wire == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        elif wire == 2:
            n, pos = _varint(buf, pos)
            val, pos = buf[pos:pos + n], pos + n
        else:
            raise EventFileError("unsupported wire type %d (field %d)" % (wire, num))
        if pos > len(buf):
            raise EventFileError("field %d runs past the end of its message" % num)
        yield num, wire, val


def _expect(wire, want, what):
    if wire != want:
        raise EventFileError("%s has wire type %d, expected %d" % (what, wire, want))


def decode_event(data):
    ev = {"wall_time": None, "step": 0}
    for num, wire, val in fields(data):
        if num == 1:
            _expect(wire, 1, "Event.wall_time")
            ev["wall_time"] = struct.unpack("<d", val)[0]
        elif num == 2:
            _expect(wire, 0, "Event.step")
            ev["step"] = val - (1 << 64) if val >= 1 << 63 else val
        elif num == 3:
            _expect(wire, 2, "Event.file_version")
            ev["file_version"] = val.decode("utf-8")
        elif num == 5:
            _expect(wire, 2, "Event.summary")
            values = ev.setdefault("values", [])
            for vnum, vwire, vval in fields(val):
                if vnum != 1:
                    continue
                _expect(vwire, 2, "Summary.value")
                tag, simple = None, None
                for fnum, fwire, fval in fields(vval):
                    if fnum == 1:
                        _expect(fwire, 2, "Summary.Value.tag")
                        tag = fval.decode("utf-8")
                    elif fnum == 2:
                        _expect(fwire, 5, "Summary.Value.simple_value")
                        simple = struct.unpack("<f", fval)[0]
                if tag is None or simple is None:
                    raise EventFileError("a Summary.Value without tag or simple_value")
                values.append((tag, simple))
        elif num == 6:
            _expect(wire, 2, "Event.session_log")
            status = 0
            for snum, swire, sval in fields(val):
                if snum == 1:
                    _expect(swire, 0, "SessionLog.status")
                    status = sval
            ev["session_log_status"] = status
    if ev["wall_time"] is None:
        raise EventFileError("an Event without wall_time")
    return ev


def read_records(path):
    """The data of every record, both CRCs checked."""
    with open(path, "rb") as f:
        blob = f.read()
    pos, out = 0, []
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise EventFileError("%s: offset %d: truncated record header" % (path, pos))
        head = blob[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if hcrc != masked_crc32c(head):
            raise EventFileError("%s: offset %d: length CRC mismatch (stored %08x, computed %08x)"
                                 % (path, pos, hcrc, masked_crc32c(head)))
        if pos + 12 + n + 4 > len(blob):
            raise EventFileError("%s: offset %d: record of %d bytes runs past the end of the file"
                                 % (path, pos, n))
        data = blob[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack("<I", blob[pos + 12 + n:pos + 16 + n])
        if dcrc != masked_crc32c(data):
            raise EventFileError("%s: offset %d: data CRC mismatch (stored %08x, computed %08x)"
                                 % (path, pos, dcrc, masked_crc32c(data)))
        out.append(data)
        pos += 16 + n
    return out


def read_events(path):
    events = []
    for i, data in enumerate(read_records(path)):
        try:
            events.append(decode_event(data))
        except EventFileError as e:
            raise EventFileError("%s: record %d: %s" % (path, i, e))
    return events


def event_files(paths):
    """Files named *tfevents* in the given directories (name order, as
    TensorBoard reads them), and files given directly."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += [os.path.join(p, n) for n in sorted(os.listdir(p)) if "tfevents" in n]
        else:
            out.append(p)
    return out


def main(argv):
    as_json = "--json" in argv
    paths = [a for a in argv if a != "--json"]
    if not paths or "-h" in paths or "--help" in paths:
        print(__doc__.strip().split("\n\n")[1])
        return 0 if paths else 2
    files = event_files(paths)
    if not files:
        print("read_tfevents: no event files (*tfevents*) in %s" % " ".join(paths), file=sys.stderr)
        return 1
    try:
        for path in files:
            for ev in read_events(path):
                if as_json:
                    print(json.dumps(dict(ev, file=path)))
                    continue
                for tag, v in ev.get("values", []):
                    print("%d\t%s\t%.9g" % (ev["step"], tag, v))
    except BrokenPipeError:  # `| head`: the reader stopped listening
        sys.stdout = open(os.devnull, "w")
        return 0
    except (EventFileError, OSError) as e:
        print("read_tfevents: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
