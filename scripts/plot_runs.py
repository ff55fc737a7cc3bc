#!/usr/bin/env python3
"""Curves of attnlab runs, mean and spread over seeds, as SVG (no dependencies).

Usage:
  python3 scripts/plot_runs.py OUT_DIR LABEL=RUN[,RUN...] [LABEL=...] [--title TEXT]
                               [--window N] [--from STEP]
  python3 scripts/plot_runs.py --self-test

Each LABEL names a variant and its runs (train.out_dir directories, one per seed; globs allowed,
matching directories only).
Reads each run's metrics.jsonl and writes to OUT_DIR:
  val_loss.svg       validation loss per evaluation: the mean over the runs, the band their min-max
  val_loss_soft.svg  (Focus runs) the same under the soft gate; val_loss is then the hard routing
  train_loss.svg     training loss, averaged over windows of --window steps, then over the runs
  dominance.svg      (Focus runs) the largest group's share of tokens, the largest over layers;
                     the dashed line is 1/K (perfect balance)
and prints a Markdown table: per label the validation loss at the last evaluation every run of
the label reached, mean +- sample std ("-" for one run), per run, the step and n. Only the steps
every run of a label reached are drawn, from --from STEP on (default: all; the first evaluations'
high losses otherwise set the scale); --window N: the training-loss window (10).
Said on stderr, never silently: a run left out of a plot (no records of it), runs of a label that
end at different steps, validation losses over different windows (val_windows), null (non-finite)
values left out. A Focus run evaluated with eval_routing soft writes the soft loss as val_loss and
the hard one as val_loss_hard: read as hard -> val_loss, soft -> val_loss_soft like the others.
"""
import glob
import html
import json
import math
import os
import re
import statistics
import sys
import tempfile

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def warn(msg):
    print(f"plot_runs: warning: {msg}", file=sys.stderr)


def read_run(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"plot_runs: {path}: no such file (expected a run directory with metrics.jsonl)")
    train, val, dom, k, windows, nulls = {}, {}, {}, None, {}, []

    def put(series, key, step, value):
        if value is None:  # a non-finite value (JSON has no NaN): left out, said
            nulls.append(f"{key} at step {step}")
        else:
            series[step] = value
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_runs: {path}:{n}: not JSON ({e})")
            step = rec.get("step")
            if step is None:
                continue
            if "loss" in rec:
                put(train, "loss", step, rec["loss"])
            if "val_loss" in rec:
                # Hard routing -> "val_loss", the soft gate -> "val_loss_soft", whichever the
                # run evaluated with (eval_routing soft: val_loss soft, val_loss_hard hard).
                hard, soft = ("val_loss_hard", "val_loss") if "val_loss_hard" in rec else \
                             ("val_loss", "val_loss_soft")
                put(val.setdefault("val_loss", {}), hard, step, rec[hard])
                if soft in rec:
                    put(val.setdefault("val_loss_soft", {}), soft, step, rec[soft])
                if "val_windows" in rec:
                    windows[step] = rec["val_windows"]
                doms = [v for key, v in rec.items()
                        if re.fullmatch(r"focus\.h\d+\.dominance", key) and v is not None]
                if doms:
                    dom[step] = max(doms)
                    shares = {key.rsplit(".", 1)[1] for key in rec if ".group_share." in key}
                    k = len(shares) or k
    if nulls:
        warn(f"{run}: {len(nulls)} null (non-finite) value(s) left out: {', '.join(nulls[:5])}"
             f"{' ...' if len(nulls) > 5 else ''}")
    return {"run": run, "train": train, "val": val.get("val_loss", {}),
            "val_soft": val.get("val_loss_soft", {}), "dominance": dom, "K": k,
            "windows": windows}


def windowed(series, window):
    """Mean of the training loss over consecutive windows of `window` steps, at the window's end."""
    out, acc = {}, []
    for step in sorted(series):
        acc.append(series[step])
        if len(acc) == window:
            out[step] = sum(acc) / window
            acc = []
    return out


def combine(curves, first_step=0):
    """(steps, mean, lo, hi) over the steps >= first_step that every curve has."""
    steps = sorted(s for s in set.intersection(*(set(c) for c in curves)) if s >= first_step)
    mean = [sum(c[s] for c in curves) / len(curves) for s in steps]
    lo = [min(c[s] for c in curves) for s in steps]
    hi = [max(c[s] for c in curves) for s in steps]
    return steps, mean, lo, hi


def nice_ticks(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 10) for i in range(first, last + 1)]


def svg_plot(path, title, ylabel, series, ref=None):
    """series: [(label, color, steps, mean, lo, hi)]; ref: a dashed horizontal line (y, text)."""
    # The legend's column fits the longest label (~6.6 px a character at 12 px sans-serif).
    longest = max((len(label) for label, *_ in series), default=0)
    L, T, B, H = 70, 40, 50, 440
    R = max(150, 50 + int(6.6 * longest))
    W = L + 460 + R
    xs = [s for _, _, st, *_ in series for s in st]
    ys = [y for *_, m, lo, hi in series for y in lo + hi]
    if ref:
        ys.append(ref[0])
    if not xs:
        return False
    xt, yt = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]
    X = lambda x: L + (x - x0) / (x1 - x0 or 1) * (W - L - R)
    Y = lambda y: H - B - (y - y0) / (y1 - y0 or 1) * (H - T - B)
    title, ylabel = html.escape(title), html.escape(ylabel)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2 - R / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for t in xt:
        out.append(f'<line x1="{X(t):.1f}" y1="{T}" x2="{X(t):.1f}" y2="{H - B}" stroke="#eee"/>')
        out.append(f'<text x="{X(t):.1f}" y="{H - B + 16}" text-anchor="middle">{t:g}</text>')
    for t in yt:
        out.append(f'<line x1="{L}" y1="{Y(t):.1f}" x2="{W - R}" y2="{Y(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" '
               f'stroke="#888"/>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(T + H - B) / 2})">{ylabel}</text>')
    if ref:
        out.append(f'<line x1="{L}" y1="{Y(ref[0]):.1f}" x2="{W - R}" y2="{Y(ref[0]):.1f}" '
                   f'stroke="#555" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{W - R - 4}" y="{Y(ref[0]) - 4:.1f}" text-anchor="end" '
                   f'fill="#555">{ref[1]}</text>')
    for i, (label, color, st, mean, lo, hi) in enumerate(series):
        band = [f"{X(s):.1f},{Y(v):.1f}" for s, v in zip(st, hi)]
        band += [f"{X(s):.1f},{Y(v):.1f}" for s, v in reversed(list(zip(st, lo)))]
        out.append(f'<polygon points="{" ".join(band)}" fill="{color}" fill-opacity="0.18" '
                   f'stroke="none"/>')
        line = " ".join(f"{X(s):.1f},{Y(v):.1f}" for s, v in zip(st, mean))
        out.append(f'<polyline class="mean" points="{line}" fill="none" stroke="{color}" '
                   f'stroke-width="2"/>')
        ly = T + 14 + 20 * i
        out.append(f'<line x1="{W - R + 12}" y1="{ly - 4}" x2="{W - R + 36}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="3"/>')
        out.append(f'<text x="{W - R + 42}" y="{ly}">{html.escape(label)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return True


def parse_groups(args):
    groups = []
    for a in args:
        if "=" not in a:
            sys.exit(f"plot_runs: '{a}': expected LABEL=RUN[,RUN...]")
        label, runs = a.split("=", 1)
        dirs, seen = [], set()
        for pattern in runs.split(","):
            if not pattern:
                continue  # a trailing comma: not the current directory
            found = [d for d in sorted(glob.glob(pattern)) if os.path.isdir(d)] or [pattern]
            for d in found:  # a run named twice (a run and a glob matching it) counts once
                if os.path.realpath(d) not in seen:
                    seen.add(os.path.realpath(d))
                    dirs.append(d)
        if not dirs:
            sys.exit(f"plot_runs: '{a}': no run")
        groups.append((label, [read_run(d) for d in dirs]))
    return groups


def plot(out_dir, groups, title="", window=10, first_step=0):
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for key, name, ylabel, ref_key in (("val", "val_loss", "validation loss (nats)", None),
                                       ("val_soft", "val_loss_soft",
                                        "validation loss, soft gate (nats)", None),
                                       ("train", "train_loss", "training loss (nats)", None),
                                       ("dominance", "dominance", "largest group's share", "K")):
        series, ks = [], set()
        for i, (label, runs) in enumerate(groups):
            series_of = [(r, windowed(r[key], window) if key == "train" else r[key]) for r in runs]
            with_key = [r for r, c in series_of if c]
            if not with_key:
                continue
            if len(with_key) < len(runs):  # drawn from the others, the missing ones named
                warn(f"{name}: {label}: {len(runs) - len(with_key)} of {len(runs)} run(s) have no "
                     f"{'records' if key != 'train' else f'window of {window} steps'} for it and "
                     f"are left out: {', '.join(r['run'] for r, c in series_of if not c)}")
            curves = [c for _, c in series_of if c]
            st, mean, lo, hi = combine(curves, first_step)
            if st:
                series.append((f"{label} (n={len(with_key)})", COLORS[i % len(COLORS)], st, mean,
                               lo, hi))
                ks |= {r["K"] for r in with_key}
            else:
                warn(f"{name}: {label}: no step that all its runs reached"
                     f"{f' from --from {first_step} on' if first_step else ''}: not drawn")
        ref = (1.0 / ks.pop(), "1/K") if ref_key and len(ks) == 1 and None not in ks else None
        path = os.path.join(out_dir, name + ".svg")
        if series and svg_plot(path, f"{title}{': ' if title else ''}{ylabel}", ylabel, series, ref):
            written.append(path)
        elif os.path.exists(path):  # an earlier call's plot would read as this one's
            os.remove(path)
    rows = ["| variant | val loss (mean ± std) | per run | step | n |", "|---|---|---|---|---|"]
    compared = {}  # label -> the val_windows of its runs at the step compared
    for label, runs in groups:
        with_val = [r for r in runs if r["val"]]
        if len(with_val) < len(runs):
            warn(f"table: {label}: {len(runs) - len(with_val)} of {len(runs)} run(s) have no "
                 f"validation loss: {', '.join(r['run'] for r in runs if not r['val'])}")
        if not with_val:
            continue
        common = set.intersection(*(set(r["val"]) for r in with_val))
        if not common:
            warn(f"table: {label}: its runs share no evaluation step: left out")
            continue
        step = max(common)
        ends = sorted({max(r["val"]) for r in with_val})
        if len(ends) > 1:
            warn(f"table: {label}: its runs end at different steps ({', '.join(map(str, ends))}): "
                 f"compared at step {step}, the last all reached")
        vals = [r["val"][step] for r in with_val]
        compared[label] = {r["windows"].get(step) for r in with_val}
        sd = f"{statistics.stdev(vals):.4f}" if len(vals) > 1 else "-"
        rows.append(f"| {label} | {statistics.mean(vals):.4f} ± {sd} | "
                    f"{' / '.join(f'{v:.4f}' for v in vals)} | {step} | {len(vals)} |")
    windows = set().union(*compared.values()) if compared else set()
    if len(windows - {None}) > 1:
        warn("table: the losses compared are over different validation windows (val_windows "
             + "; ".join(f"{label} {sorted(w - {None})}" for label, w in compared.items())
             + "): they do not compare")
    return written, "\n".join(rows)


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        for name, offset in (("a1", 0.0), ("a2", 0.2), ("b1", 1.0)):
            os.makedirs(os.path.join(tmp, name))
            with open(os.path.join(tmp, name, "metrics.jsonl"), "w") as f:
                for step in range(1, 21):
                    f.write(json.dumps({"step": step, "loss": 5.0 - 0.1 * step + offset}) + "\n")
                    if step % 5 == 0:
                        rec = {"step": step, "val_loss": 4.0 - 0.1 * step + offset}
                        if name.startswith("a"):
                            rec.update({"val_loss_soft": 3.9 - 0.1 * step + offset,
                                        "focus.h0.dominance": 0.2, "focus.h1.dominance": 0.3,
                                        "focus.h0.group_share.0": 0.5,
                                        "focus.h0.group_share.1": 0.5})
                        f.write(json.dumps(rec) + "\n")
        open(os.path.join(tmp, "a3.log"), "w").close()  # a glob's stray file: not a run
        groups = parse_groups([f"A={tmp}/a*", f"B={tmp}/b1"])
        written, table = plot(os.path.join(tmp, "out"), groups, "test", window=5)
        names = sorted(os.path.basename(p) for p in written)
        assert names == ["dominance.svg", "train_loss.svg", "val_loss.svg", "val_loss_soft.svg"], names
        # A: final val 2.0 and 2.2 -> mean 2.1, sample std 0.1414; B: 3.0 alone.
        assert "| A | 2.1000 ± 0.1414 | 2.0000 / 2.2000 | 20 | 2 |" in table, table
        assert "| B | 3.0000 ± - | 3.0000 | 20 | 1 |" in table, table
        svg = open(os.path.join(tmp, "out", "val_loss.svg")).read()
        means = re.findall(r'class="mean" points="([^"]*)"', svg)
        assert len(means) == 2 and all(len(m.split()) == 4 for m in means), means  # 4 evaluations
        dom = open(os.path.join(tmp, "out", "dominance.svg")).read()
        assert "1/K" in dom and dom.count('class="mean"') == 1, "dominance: A only, with 1/K"
        train = open(os.path.join(tmp, "out", "train_loss.svg")).read()
        first = re.findall(r'class="mean" points="([^"]*)"', train)[0].split()
        assert len(first) == 4, first  # 20 steps in windows of 5
        for lo, hi in ((3.1, 5.2), (0.12, 0.31), (-1.0, 1.0)):
            t = nice_ticks(lo, hi)
            assert t[0] <= lo and t[-1] >= hi and len(t) <= 12, (lo, hi, t)
        written, _ = plot(os.path.join(tmp, "late"), groups, "", 5, first_step=12)
        svg = open(os.path.join(tmp, "late", "val_loss.svg")).read()
        means = re.findall(r'class="mean" points="([^"]*)"', svg)
        assert all(len(m.split()) == 2 for m in means), means  # steps 15 and 20
        # Edge cases: a run that ends earlier (compared at the last common step), a run without
        # validation (left out, said), an eval_routing soft run (val_loss soft, val_loss_hard
        # hard), a null loss (left out), a run named twice (once), a label needing XML escapes.
        def write_run(name, recs):
            os.makedirs(os.path.join(tmp, name))
            with open(os.path.join(tmp, name, "metrics.jsonl"), "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in recs))
        write_run("c1", [{"step": s, "val_loss": 3.0, "val_windows": 64} for s in (5, 10, 15)])
        write_run("c2", [{"step": s, "val_loss": 4.0, "val_windows": 32} for s in (5, 10)])
        write_run("c3", [{"step": 1, "loss": None}, {"step": 2, "loss": 5.0}])
        write_run("c4", [{"step": 5, "val_loss": 2.5, "val_loss_hard": 2.0},
                         {"step": 10, "val_loss": 2.5, "val_loss_hard": 2.0}])
        groups = parse_groups([f"C & D={tmp}/c1,{tmp}/c1,{tmp}/c2,{tmp}/c3", f"E={tmp}/c4"])
        assert len(groups[0][1]) == 3, [r["run"] for r in groups[0][1]]
        assert groups[1][1][0]["val"] == {5: 2.0, 10: 2.0}, groups[1][1][0]["val"]
        assert groups[1][1][0]["val_soft"] == {5: 2.5, 10: 2.5}
        assert groups[0][1][2]["train"] == {2: 5.0}
        written, table = plot(os.path.join(tmp, "edge"), groups, "t<1>", window=1)
        assert "| C & D | 3.5000 ± 0.7071 | 3.0000 / 4.0000 | 10 | 2 |" in table, table
        import xml.dom.minidom
        for p in written:
            xml.dom.minidom.parse(p)  # escaped: parses
        assert "C &amp; D (n=2)" in open(os.path.join(tmp, "edge", "val_loss.svg")).read()
        # Bad input: a clear message and a non-zero exit.
        for argv, words in (([tmp + "/out", f"A={tmp}/none"], "no such file"),
                            ([tmp + "/out", "A"], "expected LABEL=RUN"),
                            ([tmp + "/out", f"A={tmp}/a1", "--window", "0"], "--window expects")):
            try:
                main(["plot_runs.py"] + argv)
                raise AssertionError(f"{argv}: no error")
            except SystemExit as e:
                assert e.code not in (0, None) and words in str(e.code), (argv, e.code)
    print("plot_runs self-test: ok")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return
    args, title, window, first_step = [], "", 10, 0
    it = iter(argv[1:])
    for a in it:
        if a == "--title":
            title = next(it, "")
        elif a in ("--window", "--from"):
            value = next(it, "")
            if not value.isdigit() or (a == "--window" and int(value) < 1):
                sys.exit(f"plot_runs: {a} expects a {'positive ' if a == '--window' else ''}"
                         f"integer, got '{value}'")
            window, first_step = (int(value), first_step) if a == "--window" else (window, int(value))
        else:
            args.append(a)
    if len(args) < 2:
        sys.exit(__doc__)
    written, table = plot(args[0], parse_groups(args[1:]), title, window, first_step)
    for p in written:
        print(f"wrote {p}")
    print(table)


if __name__ == "__main__":
    main(sys.argv)
