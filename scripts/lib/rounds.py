"""rounds.py: the rounds of a hostile-guest measurement (scripts/vsock-hostile-cpu.py,
scripts/net-hostile-cpu.py): their shared command line (--osprey, --guest, --rounds, --timeout),
each round's result printed with the load average at its start, then the medians of `keys` over
the rounds that did not fail (`main`, whose return is the exit status: 1 when a round failed),
and the start of one round's VM (`boot`)."""
import argparse
import json
import os
import statistics
import subprocess


def main(one_run, keys, timeout):
    """Runs `one_run(osprey, guest, timeout)` once per round; it returns a dict of figures, or
    one with an "error" key."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--osprey", default="target/release/osprey")
    ap.add_argument("--guest", default="guest-images/build/test-guest.elf")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=timeout)
    a = ap.parse_args()
    rows = []
    for r in range(a.rounds):
        la = open("/proc/loadavg").read().split()[0]
        res = one_run(os.path.abspath(a.osprey), os.path.abspath(a.guest), a.timeout)
        print("round %d (load avg %s): %s" % (r + 1, la, json.dumps(res)), flush=True)
        rows.append(res)
    ok = [x for x in rows if "error" not in x]
    if ok:
        print("median: " + json.dumps({k: statistics.median(x[k] for x in ok) for k in keys
                                       if all(x.get(k) is not None for x in ok)}))
    return 0 if len(ok) == len(rows) else 1


def boot(osprey, cfg, d):
    """Writes `cfg` to `d`/vm.json and starts `osprey --config` on it, its serial output to
    `d`/serial.txt and its log to `d`/vmm.log. Returns the process and a reader of the serial
    file. The VMM writes through a handle of its own: a shared one would share the file offset,
    and the reader's seek(0) would make the VMM's next byte overwrite the file's first."""
    with open(os.path.join(d, "vm.json"), "w") as f:
        json.dump(cfg, f)
    serial_path = os.path.join(d, "serial.txt")
    serial_out = open(serial_path, "w")
    p = subprocess.Popen([osprey, "--config", os.path.join(d, "vm.json")], stdout=serial_out,
                         stderr=open(os.path.join(d, "vmm.log"), "w"), stdin=subprocess.DEVNULL)
    return p, open(serial_path)
