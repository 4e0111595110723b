#!/usr/bin/env python3
"""Sort the samples of `perf script` (perf record -g) of one process into
where its CPU goes: the kernel (syscalls, the loopback network), split by
the Go code that entered it; the garbage collector; the scheduler;
allocation; stack growth; and otherwise the code that owns the frame
nearest the leaf (sidelock's packages, go-redis, net/http, chi, JSON, ...).
Usage: perf script -i perf.data | buckets.py"""
import collections
import re
import sys

OWNERS = [
    ("sidelock lease (internal/lease)", "sidelock/sidelock/internal/lease"),
    ("sidelock redlock engine (pkg/redlock)", "sidelock/sidelock/pkg/redlock."),
    ("sidelock redisnode pipeline (pkg/redlock/redisnode)", "sidelock/sidelock/pkg/redlock/redisnode"),
    ("sidelock httpapi", "sidelock/sidelock/httpapi"),
    ("sidelock health checks (internal/health)", "sidelock/sidelock/internal/health"),
    ("sidelock starvation probe (internal/starvation)", "sidelock/sidelock/internal/starvation"),
    ("sidelock metrics (internal/metrics)", "sidelock/sidelock/internal/metrics"),
    ("sidelock HTTP conn wrappers (internal/framing, connlimit)", "sidelock/sidelock/internal/framing"),
    ("sidelock HTTP conn wrappers (internal/framing, connlimit)", "sidelock/sidelock/internal/connlimit"),
    ("floor program (tools/floor)", "sidelock/sidelock/tools/floor"),
    ("sidelock other", "sidelock/sidelock/"),
    ("go-redis", "github.com/redis/go-redis"),
    ("chi router", "github.com/go-chi/chi"),
    ("prometheus", "github.com/prometheus"),
    ("encoding/json", "encoding/json"),
    ("crypto", "crypto/"),
    ("net/http", "net/http"),
    ("net/http", "net/textproto"),
    ("net (netpoll, conn)", "net."),
    ("net (netpoll, conn)", "internal/poll"),
    ("time, context, sync", "time."),
    ("time, context, sync", "context."),
    ("time, context, sync", "sync."),
    ("log/slog", "log/slog"),
]
GC = re.compile(r"^runtime\.(gcBgMarkWorker|gcDrain|scanobject|markroot|bgsweep|bgscavenge|gcAssistAlloc|gcStart|sweepone|greyobject|scanblock|wbBuf|gcWriteBarrier)")
SCHED = re.compile(r"^runtime\.(schedule|findRunnable|park_m|mcall|goschedImpl|stealWork|netpoll|notesleep|stopm|startm|wakep|runqgrab|checkTimers|resetspinning|execute|gopark|goready|ready|futexsleep|futexwakeup|injectglist|sysmon|usleep|handoffp|entersyscall|exitsyscall|reentersyscall)")
ALLOC = re.compile(r"^runtime\.(mallocgc|newobject|makeslice|growslice|makemap|mapassign|newarray|concatstring|rawstring|rawbyteslice|slicebytetostring|convT|mallocgcSmall|mallocgcTiny|nextFreeFast|memclrNoHeapPointers)")
STACK = re.compile(r"^runtime\.(morestack|newstack|copystack|adjustframe|gentraceback|adjustpointers)")


def samples(lines):
    frames = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        if line[0] not in " \t":
            continue  # the sample's header line
        parts = line.strip().split(None, 1)
        if len(parts) < 2:
            continue
        sym, dso = parts[1].rsplit(" (", 1) if " (" in parts[1] else (parts[1], "")
        sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
        frames.append((sym, dso))
    if frames:
        yield frames


# Frames that say how, not who: the owner is the nearest caller above them.
SKIP = ("runtime.", "internal/", "syscall.", "[unknown]", "net.", "sync.", "bufio.", "io.", "aeshash", "memeq", "indexbyte", "__vdso")


def owner(frames):
    for sym, dso in frames:
        if "kernel" in dso or sym.startswith(SKIP):
            continue
        for name, prefix in OWNERS:
            if prefix in sym:
                return name
        return "other: " + sym.split("(")[0][:60]
    return "runtime (no Go caller)"


KERNEL_SCHED = re.compile(r"^runtime\.(futex|usleep|nanotime|osyield|nanosleep|netpoll|epollwait|sched_yield|madvise|mmap|sigaltstack|tgkill|rtsigprocmask)")


def entry(frames):
    """What entered the kernel: the scheduler's own calls (futex sleeps and
    wake-ups, spinning, netpoll) or I/O on behalf of an owner."""
    syms = [sym for sym, dso in frames if "kernel" not in dso]
    if not syms:
        return "kernel thread"
    if any(KERNEL_SCHED.match(s) for s in syms[:3]) and not any(s.startswith(("syscall.", "internal/poll", "net.")) for s in syms[:8]):
        return "runtime: futex sleep/wake, spinning, netpoll"
    return "I/O syscall < " + owner([f for f in frames if "kernel" not in f[1]])


def bucket(frames):
    leaf, dso = frames[0]
    if "kernel" in dso:
        return "kernel (syscalls, loopback TCP)", entry(frames)
    syms = [s for s, _ in frames]
    if any(GC.match(s) for s in syms):
        return "garbage collector", ""
    if SCHED.match(leaf) or (leaf.startswith("runtime.") and any(SCHED.match(s) for s in syms[:4])):
        return "scheduler", ""
    if any(STACK.match(s) for s in syms[:6]):
        return "stack growth", owner(frames)
    if any(ALLOC.match(s) for s in syms[:4]):
        return "allocation (mallocgc)", owner(frames)
    if leaf.startswith("runtime.") or leaf.startswith("internal/runtime"):
        return "runtime other", owner(frames)
    return owner(frames), ""


def main():
    top = collections.Counter()
    sub = collections.defaultdict(collections.Counter)
    n = 0
    for frames in samples(sys.stdin):
        n += 1
        b, s = bucket(frames)
        top[b] += 1
        if s:
            sub[b][s] += 1
    print(f"{n} samples")
    for b, c in top.most_common():
        print(f"{100.0 * c / n:5.1f}%  {b}")
        for s, d in sub[b].most_common(8):
            print(f"         {100.0 * d / n:5.1f}%  via {s}")


if __name__ == "__main__":
    main()
