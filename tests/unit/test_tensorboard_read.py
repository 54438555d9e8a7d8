"""Event files of trainer/tensorboard.c seen from outside: the scalars that
`test_tensorboard --emit DIR` writes are read back with TensorBoard's own
EventAccumulator (what `tensorboard --logdir` uses) and with an independent
parser written here: TFRecord framing with both masked CRC32C checked by a
table-driven CRC32C of our own, and a generic protobuf decoder for Event /
Summary / Summary.Value. Every tag, step and value (as float32, NaN and
infinities included) must match the list the emitter printed; a corrupted
copy of the file must be rejected."""
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("DK_BUILD", "build")
EMITTER = os.path.join(BUILD, "tests", "unit_test_tensorboard")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL", msg, file=sys.stderr)


# ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven ----
CRC_TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    CRC_TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for byte in data:
        c = CRC_TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_tfrecords(raw):
    out, off = [], 0
    while off < len(raw):
        if off + 12 > len(raw):
            raise ValueError(f"truncated record header at byte {off}")
        (n,) = struct.unpack_from("<Q", raw, off)
        (len_crc,) = struct.unpack_from("<I", raw, off + 8)
        if masked(crc32c(raw[off:off + 8])) != len_crc:
            raise ValueError(f"length crc mismatch at byte {off}")
        data = raw[off + 12:off + 12 + n]
        if len(data) != n or off + 16 + n > len(raw):
            raise ValueError(f"truncated record at byte {off}")
        (data_crc,) = struct.unpack_from("<I", raw, off + 12 + n)
        if masked(crc32c(data)) != data_crc:
            raise ValueError(f"data crc mismatch at byte {off}")
        out.append(data)
        off += 16 + n
    return out


# ---- protobuf wire format: {field: [values]} with raw payloads ----
def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def decode(buf):
    fields, i = {}, 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unexpected wire type {wt}")
        if i > len(buf):
            raise ValueError("field runs past the end of the message")
        fields.setdefault(num, []).append((wt, v))
    return fields


def parse_events(raw):
    """-> (file_version, [(wall_time, tag, step, float32 bits)])"""
    version, scalars = None, []
    for rec in read_tfrecords(raw):
        ev = decode(rec)
        check(ev[1][0][0] == 1, "wall_time must be a fixed64 double")
        wall = struct.unpack("<d", ev[1][0][1])[0]
        step = ev.get(2, [(0, 0)])[0][1]
        if step >= 1 << 63:
            step -= 1 << 64
        if 3 in ev:
            version = ev[3][0][1].decode()
        for _, summary in ev.get(5, []):
            for _, value in decode(summary)[1]:
                val = decode(value)
                check(val[2][0][0] == 5, "simple_value must be a fixed32 float")
                scalars.append((wall, val[1][0][1].decode(), step, val[2][0][1]))
    return version, scalars


def same_f32(got, want):
    """float32 equality, except that a NaN only has to stay a NaN."""
    if math.isnan(want):
        return math.isnan(got)
    return struct.pack("<f", got) == struct.pack("<f", want)


def to_f32(x):
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:  # a double beyond float32's range is infinite as a float
        return math.copysign(math.inf, x)


def main():
    check(crc32c(b"123456789") == 0xE3069283, "crc32c check value")
    tmp = tempfile.mkdtemp(prefix="dk_tbread_")
    try:
        t0 = time.time()
        proc = subprocess.run([EMITTER, "--emit", tmp], capture_output=True, text=True, encoding="utf-8")
        t1 = time.time()
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            sys.exit(1)
        want = []
        for line in proc.stdout.splitlines():
            tag, step, value = line.split("\t")
            want.append((tag, int(step), to_f32(float(value))))
        files = [f for f in os.listdir(tmp) if f.startswith("events.out.tfevents.")]
        check(len(files) == 1, f"expected one event file, found {files}")
        path = os.path.join(tmp, files[0])
        raw = open(path, "rb").read()

        # 1. Our own reader.
        version, got = parse_events(raw)
        check(version == "brain.Event:2", f"file_version {version!r}")
        check(len(got) == len(want), f"{len(got)} scalars read, {len(want)} written")
        for (wall, tag, step, bits), (wtag, wstep, wval) in zip(got, want):
            val = struct.unpack("<f", bits)[0]
            check((tag, step) == (wtag, wstep), f"record ({tag!r}, {step}) expected ({wtag!r}, {wstep})")
            check(same_f32(val, wval), f"{tag} step {step}: {val!r} expected {wval!r}")
            check(t0 - 1 <= wall <= t1 + 1, f"wall_time {wall} outside the emitter's run [{t0}, {t1}]")
        n_special = sum(1 for _, _, _, b in got if not math.isfinite(struct.unpack("<f", b)[0]))
        print(f"own reader: {len(got)} scalars, {len(set(t for t, _, _ in want))} tags, "
              f"{n_special} NaN/inf, {len(raw)} bytes, CRCs ok")

        # A flipped byte must be caught by the CRCs.
        for pos in (3, 40, len(raw) - 2):
            bad = bytearray(raw)
            bad[pos] ^= 0x10
            try:
                read_tfrecords(bytes(bad))
                check(False, f"corruption at byte {pos} not detected")
            except ValueError:
                pass

        # 2. TensorBoard itself.
        try:
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        except ImportError as e:
            print(f"tensorboard reader: not installed ({e}); checked with the own reader only")
        else:
            acc = EventAccumulator(tmp, size_guidance={"scalars": 0})
            acc.Reload()
            check(acc.file_version == 2.0, f"EventAccumulator file_version {acc.file_version}")
            tags = sorted(set(t for t, _, _ in want))
            check(sorted(acc.Tags()["scalars"]) == tags, f"tags {sorted(acc.Tags()['scalars'])} expected {tags}")
            n, before = 0, len(failures)
            for tag in tags:
                events = acc.Scalars(tag) if tag in acc.Tags()["scalars"] else []
                exp = [(s, v) for t, s, v in want if t == tag]
                check(len(events) == len(exp), f"{tag}: {len(events)} events, expected {len(exp)}")
                for ev, (s, v) in zip(events, exp):
                    check(ev.step == s, f"{tag}: step {ev.step} expected {s}")
                    check(same_f32(ev.value, v), f"{tag} step {s}: {ev.value!r} expected {v!r}")
                    n += 1
            import tensorboard
            print(f"tensorboard reader ({tensorboard.__version__} EventAccumulator): {n} scalars, "
                  f"{len(tags)} tags compared, {len(failures) - before} mismatches")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failures", file=sys.stderr)
        sys.exit(1)


main()
