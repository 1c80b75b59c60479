"""The report of a chaos run (tests/bench/chaos.py): faults survived, time
lost, recovery times, and rank 0's final weights against the fault-free
run's."""
import math
import struct


def median(values):
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] +
                                                 values[mid]) / 2


def largest_difference(a, b):
    """The largest |a - b| over two raw fp32 dumps of one size; None when
    either is empty or they differ in size, inf when a value is not
    finite."""
    if not a or len(a) != len(b) or len(a) % 4:
        return None
    n = len(a) // 4
    worst = 0.0
    for x, y in zip(struct.unpack(f"<{n}f", a), struct.unpack(f"<{n}f", b)):
        d = abs(x - y)
        if not math.isfinite(d):
            return math.inf
        worst = max(worst, d)
    return worst


def report(args, clean, dirty, kinds):
    """The report's fields (and "ok") for the fault-free run `clean` and
    the chaos run `dirty` (run_job's results) of fault `kinds`."""
    _, _, clean_codes, clean_wall, clean_weights = clean
    _, faults, codes, wall, weights = dirty
    recovered = [f["recovered_s"] for f in faults
                 if f["recovered_s"] is not None]
    ok_exit = all(c == 0 for c in codes.values())
    survived = len(recovered) if ok_exit else 0
    by_kind = {k: sum(1 for f in faults if f["kind"] == k) for k in kinds}
    r = {
        "sync": args.sync if args.sync == "ps" else
                f"allreduce/{args.allreduce}",
        "seed": args.seed, "workers": args.workers, "shards": args.shards,
        "replicas": args.replicas, "min_workers": args.min_workers,
        "python_workers": bool(args.python),
        "steps": args.steps,
        "faults_injected": len(faults), "faults_survived": survived,
        "faults_by_kind": by_kind,
        "steps_redone": sum(f.get("redone", 0) for f in faults),
        "fault_free_s": round(clean_wall, 3), "chaos_s": round(wall, 3),
        "time_lost_s": round(wall - clean_wall, 3),
        "recovery_median_s": (None if not recovered else
                              round(median(recovered), 3)),
        "recovery_max_s": max(recovered) if recovered else None,
        "exit_codes": codes, "fault_free_exit_codes": clean_codes,
        "weights_bytes": len(weights),
        "weights_equal": bool(clean_weights) and weights == clean_weights,
        "weights_largest_difference": largest_difference(weights,
                                                         clean_weights),
        "faults": faults,
    }
    close = r["weights_equal"] or (
        args.tolerance > 0 and r["weights_largest_difference"] is not None
        and r["weights_largest_difference"] <= args.tolerance)
    r["ok"] = (ok_exit and all(c == 0 for c in clean_codes.values()) and
               survived == len(faults) and close and
               len(faults) == args.faults)
    if len(faults) < args.faults:
        print(f"chaos: the job ended after {len(faults)} of {args.faults} "
              "faults; give it more --steps", flush=True)
    return r
