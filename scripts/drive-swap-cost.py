#!/usr/bin/env python3
"""The cost of a live drive swap (PATCH /drives/{id} with path_on_host): the PATCH round trip
with the guest idle and under load, and the load's IOPS before and after the swaps.

One VM per case, the test guest on a 64 MiB drive. Idle: the guest does a short run and then
idles in ring 3 (hang=2). Load: 4 KiB random reads at QD16 on 2 queues for as long as the VM
runs; IOPS are Osprey's own drive counters (GET /drives/data, requests per second) in the 1 s
before and the 1 s after each swap. Each case swaps between two files in the drive's folder
SWAPS times (medians).

Usage: scripts/drive-swap-cost.py [OSPREY]   Env: SWAPS (5), ENGINE (Auto)
"""
import http.client, json, os, socket, statistics, subprocess, sys, tempfile, time

if any(a in ("-h", "--help") for a in sys.argv[1:]):
    print(__doc__)
    sys.exit(0)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OSPREY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/osprey")
SWAPS = int(os.environ.get("SWAPS", "5"))
ENGINE = os.environ.get("ENGINE", "Auto")
GUEST = os.path.join(ROOT, "guest-images/build/test-guest.elf")


class Conn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def call(sock, method, path, body=None):
    c = Conn(sock)
    c.request(method, path, body=None if body is None else json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    c.close()
    return r.status, (json.loads(text) if text else None)


def boot(d, args):
    sock = os.path.join(d, "api.sock")
    cfg = {
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": GUEST, "boot_args": args},
        "drives": [{"drive_id": "data", "path_on_host": os.path.join(d, "a.img"),
                    "num_queues": 2, "io_engine": ENGINE}],
        "api": {"socket": sock},
    }
    with open(os.path.join(d, "vm.json"), "w") as f:
        json.dump(cfg, f)
    p = subprocess.Popen([OSPREY, "--config", os.path.join(d, "vm.json")],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    t0 = time.time()
    while not os.path.exists(sock):
        if time.time() - t0 > 10:
            sys.exit("no API socket")
        time.sleep(0.01)
    return p, sock


def requests(sock):
    return call(sock, "GET", "/drives/data")[1]["requests"]


def iops(sock):
    r0, t0 = requests(sock), time.time()
    time.sleep(1)
    r1, t1 = requests(sock), time.time()
    return (r1 - r0) / (t1 - t0)


def swap(d, sock, i):
    name = "b.img" if i % 2 == 0 else "a.img"
    t0 = time.perf_counter()
    status, reply = call(sock, "PATCH", "/drives/data", {"path_on_host": os.path.join(d, name)})
    took = (time.perf_counter() - t0) * 1e3
    if status not in (200, 204):
        sys.exit(f"swap failed: {status} {reply}")
    return took


def case(name, args, load):
    with tempfile.TemporaryDirectory(prefix="osprey-swapcost-") as d:
        for f in ("a.img", "b.img"):
            with open(os.path.join(d, f), "wb") as out:
                out.write(os.urandom(64 << 20))
        p, sock = boot(d, args)
        before, after, t = [], [], []
        try:
            time.sleep(1.0)
            for i in range(SWAPS):
                # Under load, each swap between two 1 s windows: the host's other load drifts
                # less within 2 s than over a whole run.
                if load:
                    before.append(iops(sock))
                t.append(swap(d, sock, i))
                if load:
                    after.append(iops(sock))
                else:
                    time.sleep(0.2)
        finally:
            p.kill()
            p.wait()
        print(f"{name}: PATCH round trip ms {[round(x, 2) for x in t]} median "
              f"{statistics.median(t):.2f}")
        if load:
            print(f"{name}: IOPS in the 1 s before each swap {[round(x) for x in before]} median "
                  f"{statistics.median(before):.0f}; in the 1 s after "
                  f"{[round(x) for x in after]} median {statistics.median(after):.0f}")


case("idle", "mode=blk rw=randread count=100 hang=2", False)
case("QD16 x 2 queues", "mode=blk rw=randread bs=4096 qd=16 queues=2 count=4000000000 "
     "timeout_ms=60000", True)
