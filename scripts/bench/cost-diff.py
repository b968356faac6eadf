#!/usr/bin/env python3
"""Instructions per message by function, from two callgrind profiles of runs of N and 2N
messages (`wsbridge-bench cost --profiles DIR`): each function's self cost in the long run
minus the short one, over N. Start-up and shutdown cancel, as in the benchmark's total.

    scripts/bench/cost-diff.py DIR/callgrind.wsbridged.1sub.deflate-off.2000.out \
        DIR/callgrind.wsbridged.1sub.deflate-off.4000.out [--top 40]

--inclusive PATTERN (repeatable) prints instead the inclusive cost per message of the function
whose demangled name contains PATTERN (the costliest one that does), and their sum: one path
of a run, as `--inclusive "UpstreamFrameHandler.channelRead(" --inclusive
"channelReadComplete(context:) in conformance UpstreamFrameHandler"` is everything the
upstream's messages cost, from their read to their lines written (a Socket.IO ack's, beside
the sends that asked for it).
"""
import argparse
import re
import subprocess


def costs(path, inclusive=False):
    """Each function's cost as callgrind_annotate reports it: its self cost (summed over the
    object files that name it), or its inclusive cost (a recursive one's outermost level)."""
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", path],
        check=True, capture_output=True, text=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            name = re.sub(r"\s+\[[^\]]*\]$", "", m.group(2))
            cost = int(m.group(1).replace(",", ""))
            found[name] = max(found.get(name, 0), cost) if inclusive else found.get(name, 0) + cost
    return found


def demangle(names):
    try:
        out = subprocess.run(["swift", "demangle", "--simplified", "--compact"], input="\n".join(names),
                             check=True, capture_output=True, text=True).stdout.splitlines()
        return out if len(out) == len(names) else names
    except (OSError, subprocess.CalledProcessError):
        return names


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("short")
    parser.add_argument("long")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--inclusive", action="append", default=[])
    args = parser.parse_args()
    n = [int(re.search(r"\.(\d+)\.out$", p).group(1)) for p in (args.short, args.long)]
    messages = n[1] - n[0]
    if args.inclusive:
        short, long = costs(args.short, inclusive=True), costs(args.long, inclusive=True)
        keys = sorted(set(short) | set(long))
        names = dict(zip(keys, demangle([k.split(":", 1)[-1] for k in keys])))
        total = 0.0
        for pattern in args.inclusive:
            found = [((long.get(k, 0) - short.get(k, 0)) / messages, names[k]) for k in keys if pattern in names[k]]
            if not found:
                raise SystemExit(f"no function's name contains {pattern!r}")
            cost, name = max(found)
            total += cost
            print(f"{cost:9,.1f}  {name[:150]}")
        print(f"{total:9,.1f}  in all, per message ({messages} messages between the runs)")
        return
    short, long = costs(args.short), costs(args.long)
    rows = sorted(((long.get(k, 0) - short.get(k, 0)) / messages, k) for k in set(short) | set(long))
    rows.reverse()
    total = sum(c for c, _ in rows)
    top = rows[: args.top]
    names = demangle([k.split(":", 1)[-1] for _, k in top])
    print(f"{total:,.0f} instructions per message ({messages} messages between the runs)")
    for (cost, _), name in zip(top, names):
        print(f"{cost:9,.1f}  {name[:150]}")


if __name__ == "__main__":
    main()
