#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (run from anywhere; idempotent)."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")
F_NEXT, F_WRITE = 1, 2
IN, OUT, FLUSH, GET_ID, DISCARD, WRITE_ZEROES = 0, 1, 4, 8, 11, 13


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


class Image:
    def __init__(self):
        self.b = bytearray()

    def w(self, addr, data):
        if len(self.b) < addr + len(data):
            self.b.extend(b"\0" * (addr + len(data) - len(self.b)))
        self.b[addr:addr + len(data)] = data


def desc(addr, length, flags, nxt):
    return struct.pack("<QIHH", addr, length, flags, nxt)


def chains(img, base, specs):
    """specs: list of chains, each a list of (kind, sector, [(len, write)]) -> descriptors.
    Buffers are laid out from `base`; returns head indices."""
    heads, i, at = [], 0, base
    for kind, sector, bufs, extra in specs:
        heads.append(i)
        parts = [(at, 16, 0)]
        img.w(at, struct.pack("<IIQ", kind, 0, sector))
        at += 0x40
        for length, write in bufs:
            parts.append((at, length, F_WRITE if write else 0))
            if extra is not None:
                img.w(at, extra)
            at += (length + 0x3f) & ~0x3f
        parts.append((at, 1, F_WRITE))
        img.w(at, b"\xff")
        at += 0x40
        for j, (a, l, fl) in enumerate(parts):
            last = j == len(parts) - 1
            img.w(16 * (i + j), desc(a, l, fl | (0 if last else F_NEXT), 0 if last else i + j + 1))
        i += len(parts)
    return heads


SPECS = {
    "read_write": [(IN, 8, [(512, True)], None), (OUT, 0, [(512, False), (512, False)], None)],
    "flush_getid": [(FLUSH, 0, [], None), (GET_ID, 0, [(20, True)], None)],
    "discard_wz": [(DISCARD, 0, [(16, False)], struct.pack("<QII", 4, 8, 0)),
                   (WRITE_ZEROES, 0, [(16, False)], struct.pack("<QII", 16, 8, 1))],
    "bad_past_end": [(IN, 4096, [(512, True)], None), (99, 0, [], None)],
}

# blk_request: flags (size 16 = exponent 3), capacity 2048 sectors, image at 0.
for name, spec in SPECS.items():
    img = Image()
    heads = chains(img, 0x100, spec)
    img.w(0x1000, struct.pack("<HH", 0, len(heads)) + b"".join(struct.pack("<H", h) for h in heads))
    put("blk_request", name, bytes([3]) + struct.pack("<Q", 2048) + bytes(img.b))

# blk_queue, model mode: buffers above the ring area; two rounds publishing the heads.
for name, spec in SPECS.items():
    img = Image()
    heads = chains(img, 0x3000, spec)
    hdr = bytes([3, 15]) + struct.pack("<Q", 2048) + bytes([1])  # flags, depth 16, cap, 2 rounds
    r1 = bytes([1]) + struct.pack("<H", heads[0])
    r2 = bytes([0x80 | (len(heads) - 1)]) + b"".join(struct.pack("<H", h) for h in heads[1:])
    put("blk_queue", "model_" + name, hdr + r1 + r2 + bytes(img.b))
# blk_queue, hostile mode: rings in the image; round 1 patches avail idx to 2, round 2 to 0x7fff.
img = Image()
heads = chains(img, 0x100, SPECS["read_write"])
img.w(0x1000, struct.pack("<HH", 0, 0) + b"".join(struct.pack("<H", h) for h in heads))
hdr = bytes([0x20 | 3, 3]) + struct.pack("<Q", 2048) + bytes([1])
r1 = bytes([0]) + struct.pack("<I", 0x1002) + bytes([2]) + struct.pack("<H", 2)
r2 = bytes([0x80]) + struct.pack("<I", 0x1002) + bytes([2]) + struct.pack("<H", 0x7fff)
put("blk_queue", "hostile_avail_idx", hdr + r1 + r2 + bytes(img.b))


# virtio_pci: 8-byte ops (see the target's doc comment).
def op(mmio, write, width, off, value=0, target=0):
    w = {1: 0, 2: 1, 4: 2, 8: 3}[width]
    return bytes([(1 if mmio else 0) | (2 if write else 0) | w << 2 | target << 4]) + \
        struct.pack("<HBI", off, 0, value & 0xffffffff)


def bar(write, width, off, value=0):
    return op(True, write, width, off, value)


def bring_up(features_hi=1, features_lo=0x20000002):
    ops = [bar(True, 1, 0x14, 0), bar(True, 1, 0x14, 1), bar(True, 1, 0x14, 3),
           bar(True, 4, 0x08, 0), bar(True, 4, 0x0c, features_lo),
           bar(True, 4, 0x08, 1), bar(True, 4, 0x0c, features_hi),
           bar(True, 1, 0x14, 0x0b), bar(False, 1, 0x14)]
    for v in range(3):  # MSI-X table entries
        ops += [bar(True, 4, 0x4000 + 16 * v, 0xfee00000), bar(True, 4, 0x4004 + 16 * v, 0),
                bar(True, 4, 0x4008 + 16 * v, 0x40 + v), bar(True, 4, 0x400c + 16 * v, 0)]
    ops.append(bar(True, 2, 0x10, 0))  # config vector
    for q, size, base in ((0, 64, 0x10000), (1, 128, 0x20000)):
        ops += [bar(True, 2, 0x16, q), bar(True, 2, 0x18, size), bar(True, 2, 0x1a, q + 1)]
        for i, a in enumerate((base, base + 0x1000, base + 0x2000)):
            ops += [bar(True, 4, 0x20 + 8 * i, a), bar(True, 4, 0x24 + 8 * i, 0)]
        ops.append(bar(True, 2, 0x1c, 1))
    ops += [bar(True, 1, 0x14, 0x0f), bar(False, 1, 0x14), bar(True, 2, 0x3000, 0),
            bar(True, 2, 0x3004, 1), bar(False, 1, 0x1000), bar(False, 4, 0x2000),
            bar(False, 8, 0x5000)]
    return ops


caps = [op(False, False, 1, 0x34)] + [op(False, False, 4, o) for o in range(0x40, 0x100, 4)]
put("virtio_pci", "bring_up", bytes([0]) + b"".join(bring_up()))
put("virtio_pci", "bring_up_reset_again",
    bytes([0]) + b"".join(bring_up() + [bar(True, 1, 0x14, 0)] + bring_up()))
put("virtio_pci", "activate_fails", bytes([1]) + b"".join(bring_up()))
put("virtio_pci", "config_walk_and_bar_move", bytes([0]) + b"".join(
    caps + [op(False, True, 4, 0x10, 0xffffffff), op(False, False, 4, 0x10),
            op(False, True, 4, 0x10, 0xd0010000), op(False, True, 4, 0x14, 0),
            op(False, True, 2, 0x04, 0x0006), op(False, True, 4, 0, 0x80000800, target=3),
            op(False, False, 4, 4, 0, target=3)] + bring_up()))

# vm_config
ex = os.path.join(HERE, "..", "..", "examples")
for f in sorted(os.listdir(ex)):
    if f.endswith(".json"):
        with open(os.path.join(ex, f), "rb") as fh:
            put("vm_config", f, fh.read())
put("vm_config", "minimal.json", b'{"boot-source":{"kernel_image_path":"/k"}}')
put("vm_config", "full.json", json.dumps({
    "machine-config": {"vcpu_count": 4, "mem_size_mib": 512},
    "boot-source": {"kernel_image_path": "/k", "initrd_path": "/i", "boot_args": "console=ttyS0"},
    "drives": [{"drive_id": "d0", "path_on_host": "/d", "is_read_only": True, "direct": True,
                "io_engine": "Sync", "num_queues": 4, "queue_size": 128, "iothread": "io0"}],
    "iothreads": [{"id": "io0", "poll_max_ns": 65536, "poll_grow": 2, "poll_shrink": 2,
                   "poll_policy": "Weighted", "poll_weight": 4, "max_batch": 64,
                   "io_uring": {"single_issuer": True, "coop_taskrun": True, "taskrun_flag": False},
                   "cpu_affinity": [0, 1]}],
    "api": {"socket": "/tmp/osprey.sock"},
    "metrics": {"path": "/tmp/osprey-metrics.json", "interval_ms": 1000},
}, indent=1).encode())
put("vm_config", "bad_vcpus.json", b'{"boot-source":{"kernel_image_path":"/k"},"machine-config":{"vcpu_count":0}}')


# api_router: flags, method index, path\n, headers, \n, body
def req(name, method, path, headers=(), body=b"", flags=0):
    put("api_router", name, bytes([flags, method]) + path + b"\n" +
        b"".join(h + b"\n" for h in headers) + b"\n" + body)


GET, PUT, PATCH, POST, DELETE = 0, 1, 2, 3, 4
req("info", GET, b"/")
req("config", GET, b"/vm/config")
req("iothreads", GET, b"/iothreads")
req("iothread", GET, b"/iothreads/io0")
req("patch", PATCH, b"/iothreads/io0", [b"content-type: application/json"],
    b'{"poll_max_ns": 1000, "poll_policy": "Weighted", "poll_weight": 4, "max_batch": 16}')
req("patch_unknown_field", PATCH, b"/iothreads/io0", [b"content-type: application/json"], b'{"x": 1}')
req("drives", GET, b"/drives")
req("drive_broken", GET, b"/drives/broken")
req("metrics_prom", GET, b"/metrics?format=prometheus")
req("metrics_accept", GET, b"/metrics", [b"accept: text/plain"])
req("metrics_fuzzed_json", GET, b"/metrics?format=prometheus", [],
    json.dumps({"vm": {"state": "Paused", "uptime_ms": 1, "vcpus": 1},
                "iothreads": [{"id": "a", "stats": {"x": 1}}],
                "drives": [{"drive_id": "d", "batch_bounds": [1, 2], "batch_hist": [1, 2, 3]}]}).encode(),
    flags=1)
req("action", PUT, b"/actions", [b"content-type: application/json"], b'{"action_type": "Pause"}')
req("action_dropped", PUT, b"/actions", [b"content-type: application/json"],
    b'{"action_type": "Shutdown"}', flags=2)
req("no_such_path", DELETE, b"/nope")
req("wrong_method", POST, b"/drives")
req("custom_method", 7, b"FETCH\n/")
