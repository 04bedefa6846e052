#!/usr/bin/env python3
"""A host hiccup meter: sleeps 1 ms at a time and logs every wake-up later than 20 ms, with the
host's CPU steal (ticks of /proc/stat since the start) at that moment. A stall of the whole
host (the VM descheduled, the scheduler starving everyone) shows here as it does in any
server; a stall of one server's workers does not.

    hiccup.py LOG SECONDS
"""

import sys
import time


def steal_ticks():
    return int(open("/proc/stat").readline().split()[8])


def main():
    log = open(sys.argv[1], "w")
    end = time.time() + float(sys.argv[2])
    start_steal = steal_ticks()
    last = time.monotonic()
    wakeups = 0
    while time.time() < end:
        time.sleep(0.001)
        now = time.monotonic()
        gap, last = now - last, now
        wakeups += 1
        if gap > 0.02:
            print(f"gap {time.time():.6f} {gap * 1e3:.1f} steal {steal_ticks() - start_steal}",
                  file=log, flush=True)
    print(f"done wakeups {wakeups} steal_ticks {steal_ticks() - start_steal}", file=log, flush=True)


if __name__ == "__main__":
    main()
