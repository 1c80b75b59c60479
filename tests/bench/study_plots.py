#!/usr/bin/env python3
"""Draws the plots of `lockstep_bench study` from the files it writes.

    study_plots.py OUT_DIR

reads OUT_DIR/study.csv, study_steps.csv and study.json and writes
study_step_time.png, study_breakdown.png, study_loss.png,
study_stragglers.png, study_model_check.png and study_crossover.png
there. Debian's
python3-matplotlib is all it needs. Small PNGs (about 100 dpi), so that the
report can keep them in the repository.
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # No display: files only.
import matplotlib.pyplot as plt  # noqa: E402

DPI = 80
# One colour per line of the step-time plot, shared by every figure.
COLOURS = {
    "ps k=1": "tab:red",
    "ps k=2": "tab:orange",
    "ps k=n": "tab:brown",
    "ps k=n colocated": "tab:green",
    "allreduce gloo": "tab:blue",
    "allreduce grpc-ring": "tab:cyan",
    "async": "tab:purple",
    "ssp s=2": "tab:pink",
    "ps b=1": "tab:olive",
}


def number(text):
    return float(text) if text not in ("", None) else None


def read_rows(out_dir):
    with open(os.path.join(out_dir, "study.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    for r in rows:
        for key in ("workers", "shards", "model_bytes", "backup_workers"):
            r[key] = int(r[key])
    return rows


def read_steps(out_dir):
    steps = {}
    with open(os.path.join(out_dir, "study_steps.csv"), newline="") as f:
        for r in csv.DictReader(f):
            s = steps.setdefault(r["run_id"], ([], [], []))
            s[0].append(int(r["step"]))
            s[1].append(float(r["seconds"]))
            s[2].append(float(r["loss"]))
    return steps


def line_name(row):
    """The step-time line a comm run belongs to; k = n gets its own line."""
    if row["mode"] != "ps":
        return row["label"]
    if row.get("placement") == "colocated":
        return "ps k=n colocated"
    if row["shards"] == row["workers"] and row["shards"] > 2:
        return "ps k=n"
    return row["label"]


def size_text(nbytes):
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.0f} KB"


def plot_step_time(rows, links, path):
    comm = [r for r in rows if r["kind"] == "comm"]
    sizes = {l: sorted({r["model_bytes"] for r in comm if r["link"] == l}) for l in links}
    cols = max((len(s) for s in sizes.values()), default=0)
    if cols == 0:
        return
    fig, axes = plt.subplots(len(links), cols, figsize=(4.2 * cols, 3.4 * len(links)),
                             squeeze=False)
    for i, link in enumerate(links):
        for j in range(cols):
            ax = axes[i][j]
            if j >= len(sizes[link]):
                ax.axis("off")
                continue
            m = sizes[link][j]
            runs = [r for r in comm if r["link"] == link and r["model_bytes"] == m]
            lines = {}
            for r in runs:
                names = [line_name(r)]
                if (r["mode"] == "ps" and r["shards"] == r["workers"] == 2
                        and r.get("placement") != "colocated"):
                    names.append("ps k=n")  # k=2 is also k=n at n=2.
                for name in names:
                    lines.setdefault(name, []).append(r)
            ring_model = {}
            for name, rs in sorted(lines.items()):
                rs.sort(key=lambda r: r["workers"])
                x = [r["workers"] for r in rs]
                y = [float(r["median_step_s"]) * 1e3 for r in rs]
                ax.plot(x, y, "o-", color=COLOURS.get(name, "gray"), label=name)
                model = [number(r["model_step_s"]) for r in rs]
                if all(v is not None for v in model):
                    if name.startswith("allreduce"):
                        ring_model.update({r["workers"]: v for r, v in zip(rs, model)})
                    else:
                        ax.plot(x, [v * 1e3 for v in model], "--",
                                color=COLOURS.get(name, "gray"), alpha=0.7)
            if ring_model:
                xs = sorted(ring_model)
                ax.plot(xs, [ring_model[n] * 1e3 for n in xs], "--", color="tab:blue",
                        alpha=0.7, label="cost model (dashed)")
            ax.set_title(f"{link}: M = {size_text(m)}")
            ax.set_xlabel("workers n")
            ax.set_ylabel("median step (ms)")
            ax.set_xticks(sorted({r["workers"] for r in runs}))
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_breakdown(rows, links, path):
    """Client phases of each mode at the largest M both links share, n = 4."""
    comm = [r for r in rows if r["kind"] == "comm"]
    panels = []
    for link in links:
        runs = [r for r in comm if r["link"] == link]
        if not runs:
            continue
        n = max(r["workers"] for r in runs)
        m = max(r["model_bytes"] for r in runs if r["workers"] == n and r["model_bytes"] <= 10e6)
        panels.append((link, n, m, [r for r in runs if r["workers"] == n and r["model_bytes"] == m]))
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False)
    for ax, (link, n, m, runs) in zip(axes[0], panels):
        runs.sort(key=lambda r: (r["mode"] != "ps", r["shards"], r["mode"]))
        for i, r in enumerate(runs):
            step = float(r["median_step_s"]) * 1e3
            if r["mode"] == "ps":
                parts = [("client encode", float(r["client_encode_s"]), "tab:green"),
                         ("client send", float(r["client_send_s"]), "tab:olive"),
                         ("client wait", float(r["client_wait_s"]), "tab:gray")]
                bottom = 0
                for name, seconds, colour in parts:
                    ax.bar(i - 0.15, seconds * 1e3, 0.3, bottom=bottom, color=colour,
                           label=name if i == 0 else None)
                    bottom += seconds * 1e3
                server = (float(r["server_accumulate_s"]) + float(r["server_apply_s"])) / r["shards"]
                ax.bar(i + 0.18, server * 1e3, 0.2, color="tab:red", hatch="//",
                       label="server sum + apply per shard" if i == 0 else None)
            else:
                ax.bar(i - 0.15, step, 0.3, color=COLOURS.get(r["label"], "tab:blue"),
                       label="all-reduce (one call)" if r["mode"] == "gloo" else None)
            ax.plot([i - 0.3, i + 0.3], [step, step], "k-", lw=1.5,
                    label="median step" if i == 0 else None)
            model = number(r["model_step_s"])
            if model is not None:
                ax.plot([i - 0.3, i + 0.3], [model * 1e3] * 2, "r--", lw=1.2,
                        label="cost model" if i == 0 else None)
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([r["label"].replace("allreduce ", "") for r in runs], fontsize=8)
        ax.set_ylabel("ms per step")
        ax.set_title(f"{link}: n = {n}, M = {size_text(m)}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def smooth(values, window=10):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_loss(rows, steps, links, path):
    mlp = [r for r in rows if r["kind"] == "mlp" and r["run_id"] in steps]
    links = [l for l in links if any(r["link"] == l for r in mlp)]
    if not links:
        return
    fig, axes = plt.subplots(len(links), 2, figsize=(10, 3.4 * len(links)), squeeze=False)
    for i, link in enumerate(links):
        for r in [r for r in mlp if r["link"] == link]:
            step, seconds, loss = steps[r["run_id"]]
            colour = COLOURS.get(r["label"], None)
            axes[i][0].plot(step, smooth(loss), color=colour, label=r["label"], lw=1)
            axes[i][1].plot(seconds, smooth(loss), color=colour, label=r["label"], lw=1)
        axes[i][0].set_xlabel("step (rank 0's)")
        axes[i][1].set_xlabel("wall-clock seconds since training began")
        for ax in axes[i]:
            ax.set_ylabel("batch loss (mean of 10)")
            ax.set_title(f"{link}: MLP, {mlp[0]['workers']} workers x batch 64")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_stragglers(rows, links, path):
    runs = [r for r in rows if r["kind"] == "straggler"]
    links = [l for l in links if any(r["link"] == l for r in runs)]
    if not links:
        return
    fig, axes = plt.subplots(1, len(links), figsize=(6 * len(links), 3.6), squeeze=False)
    for ax, link in zip(axes[0], links):
        rs = [r for r in runs if r["link"] == link]
        y = range(len(rs))
        ax.barh([v + 0.2 for v in y], [float(r["median_step_s"]) * 1e3 for r in rs], 0.4,
                color="tab:blue", label="median step (rank 0)")
        ax.barh([v - 0.2 for v in y], [float(r["mean_step_s"]) * 1e3 for r in rs], 0.4,
                color="tab:orange", label="mean step (wall / steps)")
        for v, r in zip(y, rs):
            # What the mode costs in accuracy, next to what it saves in time.
            ax.text(max(float(r["median_step_s"]), float(r["mean_step_s"])) * 1e3 + 0.5, v,
                    f"loss {float(r['final_loss']):.3f}, test acc "
                    f"{float(r['test_accuracy']):.3f}", va="center", fontsize=7)
        ax.set_xlim(right=ax.get_xlim()[1] * 1.45)
        ax.set_yticks(list(y))
        ax.set_yticklabels([r["label"] for r in rs], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms per step")
        ax.set_title(f"{link}: stragglers, MLP, {rs[0]['workers']} workers")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_model_check(rows, meta, path):
    runs = [r for r in rows if r["kind"] == "comm" and number(r["model_step_s"])]
    if not runs:
        return
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    top = max(max(float(r["median_step_s"]), float(r["model_step_s"])) for r in runs) * 1.3
    low = min(float(r["model_step_s"]) for r in runs) * 0.5
    ax.fill_between([low, top], [low * 0.85, top * 0.85], [low * 1.15, top * 1.15],
                    color="tab:green", alpha=0.15, label="within 15%")
    ax.plot([low, top], [low, top], "k-", lw=0.8)
    # Where a PS lands when a shard's upload and download do not overlap.
    ax.plot([low, top], [2 * low, 2 * top], "k:", lw=0.8, label="2 x model")
    for r in runs:
        big = r["model_bytes"] >= 10e6
        colour = COLOURS.get(line_name(r), "gray")
        ax.plot(float(r["model_step_s"]), float(r["median_step_s"]), "o",
                color=colour, mfc=colour if big else "none", ms=6)
    for name, colour in COLOURS.items():
        if any(line_name(r) == name for r in runs):
            ax.plot([], [], "o", color=colour, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cost model with headers and chunks (s)")
    ax.set_ylabel("measured median step (s)")
    ax.set_title(f"simulated {meta['sim_rate_gbit']:g} Gbit/s links\n"
                 "filled: M >= 10 MB (checked), hollow: smaller", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_crossover(crossover, path):
    """Each PS run's median over gloo's at the same n and M: below 1, PS wins."""
    runs = [c for c in crossover if c["gloo_s"] > 0]
    if not runs:
        return
    sizes = sorted({c["model_bytes"] for c in runs})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.4), squeeze=False)
    for ax, m in zip(axes[0], sizes):
        here = [c for c in runs if c["model_bytes"] == m]
        for placement, marker in (("dedicated", "o-"), ("colocated", "s--")):
            for n in sorted({c["workers"] for c in here}):
                rs = sorted((c for c in here if c["workers"] == n
                             and c["placement"] == placement), key=lambda c: c["shards"])
                if not rs:
                    continue
                ax.plot([c["shards"] for c in rs], [c["ps_s"] / c["gloo_s"] for c in rs],
                        marker, label=f"n={n} {placement}")
        ax.axhline(1.0, color="tab:blue", lw=1, label="gloo ring all-reduce")
        ax.set_title(f"sim: M = {size_text(m)}")
        ax.set_xlabel("PS shards k")
        ax.set_ylabel("PS step / gloo step")
        ax.set_xticks(sorted({c["shards"] for c in here}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    rows = read_rows(out_dir)
    steps = read_steps(out_dir)
    with open(os.path.join(out_dir, "study.json")) as f:
        document = json.load(f) if os.path.getsize(f.name) else {}
    meta = document.get("study", {})
    crossover = document.get("crossover", [])
    links = [l for l in ("loopback", "sim") if any(r["link"] == l for r in rows)]
    meta.setdefault("sim_rate_gbit", 1)
    outputs = {
        "study_step_time.png": lambda p: plot_step_time(rows, links, p),
        "study_breakdown.png": lambda p: plot_breakdown(rows, links, p),
        "study_loss.png": lambda p: plot_loss(rows, steps, links, p),
        "study_stragglers.png": lambda p: plot_stragglers(rows, links, p),
        "study_model_check.png": lambda p: plot_model_check(rows, meta, p),
        "study_crossover.png": lambda p: plot_crossover(crossover, p),
    }
    for name, draw in outputs.items():
        path = os.path.join(out_dir, name)
        draw(path)
        if os.path.exists(path):
            print(f"plot {path}")


if __name__ == "__main__":
    main()
