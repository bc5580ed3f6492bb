#!/usr/bin/env python3
"""Writes a long snapshot in PyTorch's own pickle layout by repeating a real
snapshot's first device trace, to time the reader on what PyTorch writes.

Each entry is a new dict with a new stack list of the same frame dicts and a
new `compile_context` str, as `torch.cuda.memory._snapshot()` builds them,
pickled by CPython's `pickle.dump` (protocol 4, with its 64 KiB frames) as
`torch.cuda.memory._dump_snapshot` does. The trace is not a replayable one
(its allocations repeat): it is for reading speed and memory only.

    python3 scripts/replicate_snapshot.py \
        data/traces/pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle 1000000 real1m.pickle
"""

import pickle
import sys


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} SNAPSHOT.pickle ENTRIES OUT.pickle")
    source, entries, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(source, "rb") as f:
        snapshot = pickle.load(f)
    trace = snapshot["device_traces"][0]
    if not trace:
        sys.exit(f"{source}: its first device trace is empty; pick a snapshot with a trace")
    long_trace = []
    for i in range(entries):
        entry = {}
        for key, value in trace[i % len(trace)].items():
            if key == "frames":
                value = list(value)  # a new list of the same frame dicts
            elif key == "compile_context":
                value = "".join([value[:1], value[1:]])  # a new str object
            entry[key] = value
        long_trace.append(entry)
    snapshot["device_traces"] = [long_trace] + snapshot["device_traces"][1:]
    with open(out, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    print(f"wrote {out}: {entries} trace entries")


if __name__ == "__main__":
    main()
