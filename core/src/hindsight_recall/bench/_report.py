"""The markdown tables and the PNG plot of a ``bench scale`` report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError

PIP_LINE = "pip install 'hindsight-recall[bench]'  (or: pip install matplotlib)"


def require_matplotlib() -> Any:
    """Import matplotlib with a headless backend, or say how to install it."""
    try:
        import matplotlib  # late: only the plot needs it
    except ImportError as exc:
        raise ConfigError(f"the scale plot needs matplotlib: {PIP_LINE}; or pass --no-plot") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _size(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def load_and_links(size: dict[str, Any]) -> float:
    """Memories per second of the load and the links alone (no embedding, no HNSW build)."""
    i = size["ingest"]
    return float(size["memories"] / max(i["load_seconds"] + i["link_seconds"], 1e-9))


def _hnsw_seconds(ingest: dict[str, Any]) -> float:
    """Flagging rows into HNSW indexes plus building a slot's indexes after the load (reports from
    before slots have no build)."""
    return float(ingest["index_seconds"] + ingest.get("index_build_seconds", 0.0))


def markdown(report: dict[str, Any]) -> str:
    """Ingest, recall latency, phases and concurrency tables of a report; with a comparison, the
    tables of both servers and the ratios.

    :param report: what :func:`~hindsight_recall.bench.scale.run_scale` returns.
    """
    if not report.get("comparison"):
        return _tables(report["sizes"])
    target = report["comparison"][0]["target"]
    return "\n".join([f"## On the {target} server", "", _tables(report["sizes"]),
                      "## On the embedded single node (the same data, in the same run)", "",
                      _tables(report["embedded"]["sizes"]), *_ratios(report["comparison"])]) + "\n"


def comparison(measured: dict[str, Any], embedded: dict[str, Any]) -> dict[str, Any]:
    """One size's recall p50 / p95 and throughput on the measured server against the embedded single
    node, with their ratios and a one-line summary (``line``).

    :param measured: a size of a report (on ``--database-url``).
    :param embedded: the same size on the embedded server.
    """
    recall = []
    for config, budgets in measured["recall"].items():
        for budget, row in budgets.items():
            base = embedded["recall"][config][budget]
            recall.append({"config": config, "budget": budget,
                           **{f"{k}_ms": row[k] for k in ("p50", "p95")},
                           **{f"embedded_{k}_ms": base[k] for k in ("p50", "p95")},
                           **{f"{k}_ratio": _ratio(row[k], base[k]) for k in ("p50", "p95")}})
    throughput = []
    for a, b in zip(measured["concurrency"], embedded["concurrency"], strict=True):
        per_s, base_per_s = a["throughput_per_s"], b["throughput_per_s"]
        throughput.append({"concurrency": a["concurrency"], "per_s": per_s, "embedded_per_s": base_per_s,
                           "ratio": _ratio(per_s, base_per_s)})
    target = measured["target"]
    headline = next((r for r in recall if r["config"] == "all arms" and r["budget"] == "mid"), recall[0])
    line = (f"{target} / embedded: p50 ({headline['config']}, {headline['budget']}) {headline['p50_ms']:.1f} / "
            f"{headline['embedded_p50_ms']:.1f} ms = {_times(headline['p50_ratio'])}"
            + "".join(f"; {t['concurrency']} concurrent {t['per_s']:.1f} / {t['embedded_per_s']:.1f} recalls/s = "
                      f"{_times(t['ratio'])}" for t in throughput))
    return {"memories": measured["memories"], "banks": measured["banks"], "target": target, "recall": recall,
            "throughput": throughput, "line": line}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def _times(ratio: float | None) -> str:
    return "–" if ratio is None else f"{ratio:.2f}×"


def _ratios(rows: list[dict[str, Any]]) -> list[str]:
    target = rows[0]["target"]
    out = ["### Side by side: " + target + " / embedded", "",
           f"| memories | banks | configuration | budget | {target} p50 / p95 ms | embedded p50 / p95 ms "
           "| p50 ratio | p95 ratio |", "|---:|---:|---|---|---:|---:|---:|---:|"]
    for c in rows:
        for r in c["recall"]:
            out.append(f"| {_size(c['memories'])} | {c['banks']} | {r['config']} | {r['budget']} | "
                       f"{r['p50_ms']:.1f} / {r['p95_ms']:.1f} | "
                       f"{r['embedded_p50_ms']:.1f} / {r['embedded_p95_ms']:.1f} "
                       f"| {_times(r['p50_ratio'])} | {_times(r['p95_ratio'])} |")
    out += ["", f"| memories | banks | concurrency | {target} recalls/s | embedded recalls/s | ratio |",
            "|---:|---:|---:|---:|---:|---:|"]
    for c in rows:
        for t in c["throughput"]:
            out.append(f"| {_size(c['memories'])} | {c['banks']} | {t['concurrency']} | {t['per_s']:.1f} | "
                       f"{t['embedded_per_s']:.1f} | {_times(t['ratio'])} |")
    return ["", *out]


def _tables(sizes: list[dict[str, Any]]) -> str:
    out = ["### Ingest (one bulk retain into new banks)", "",
           "| memories | banks | memories/s: load + links | + HNSW build | + embedding | load s | links s "
           "| HNSW build s | links per memory | bytes per memory |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in sizes:
        i, d = s["ingest"], s["database"]
        est = " (est.)" if i.get("embedding_estimated") else ""
        out.append(f"| {_size(s['memories'])} | {s.get('banks', 1)} | {load_and_links(s):,.0f} | "
                   f"{i['per_second_without_embedding']:,.0f} | "
                   f"{i['per_second_with_embedding']:,.0f}{est} | {i['load_seconds']:.1f} | "
                   f"{i['link_seconds']:.1f} | "
                   f"{_hnsw_seconds(i):.1f} | {i['links_per_memory']:.1f} | {d['bytes_per_memory']:,.0f} |")
    configs = list(sizes[0]["recall"]) if sizes else []
    out += ["", "### Recall latency, end to end (ms)", "",
            "| memories | budget | " + " | ".join(f"{c} p50 / p95 / p99" for c in configs) + " |",
            "|---:|---|" + "---:|" * len(configs)]
    for s in sizes:
        for budget in s["recall"][configs[0]]:
            rows = [s["recall"][c][budget] for c in configs]
            cells = [f"{r['p50']:.1f} / {r['p95']:.1f} / {r['p99']:.1f}" for r in rows]
            out.append(f"| {_size(s['memories'])} | {budget} | " + " | ".join(cells) + " |")
    if sizes:
        last = sizes[-1]["recall"]
        arms = {c: ", ".join(next(iter(last[c].values()))["arms"]) for c in configs}
        out += ["", "Arms that ran: " + "; ".join(f"{c}: {a}" for c, a in arms.items()) + "."]
    out += _phases(sizes, configs)
    out += ["", "### Concurrent recalls (budget mid, all arms, one process)", "",
            "| memories | concurrency | recalls/s | p50 ms | p95 ms | errors |",
            "|---:|---:|---:|---:|---:|---:|"]
    for s in sizes:
        for r in s["concurrency"]:
            out.append(f"| {_size(s['memories'])} | {r['concurrency']} | {r['throughput_per_s']:.1f} | "
                       f"{r['p50']:.1f} | "
                       f"{r['p95']:.1f} | {sum(r['errors'].values())} |")
    out += _reranker(sizes)
    return "\n".join(out) + "\n"


def _reranker(sizes: list[dict[str, Any]]) -> list[str]:
    """The default cross-encoder's cost, where it was measured."""
    rows = [s for s in sizes if s.get("reranker", {}).get("recall")]
    if not rows:
        return []
    out = ["", "### With the default cross-encoder (budget mid, all arms; random weights of the default's shape)", "",
           "| memories | candidates reranked | recall p50 / p95 ms | reranking alone p50 / p95 ms | without p50 ms |",
           "|---:|---:|---:|---:|---:|"]
    for s in rows:
        r = s["reranker"]
        without = s["recall"].get("all arms", {}).get("mid", {}).get("p50")
        out.append(f"| {_size(s['memories'])} | {r['mean_candidates_reranked']:.0f} | "
                   f"{r['recall']['p50']:.1f} / {r['recall']['p95']:.1f} | "
                   f"{r['reranking_phase']['p50']:.1f} / {r['reranking_phase']['p95']:.1f} | "
                   f"{'' if without is None else f'{without:.1f}'} |")
    return out


def _phases(sizes: list[dict[str, Any]], configs: list[str]) -> list[str]:
    if not sizes or "mid" not in sizes[0]["recall"][configs[0]]:
        return []
    names: list[str] = []
    for s in sizes:
        for name in s["recall"][configs[0]]["mid"]["phases"]:
            if name not in names:
                names.append(name)
    out = ["", f"### Phases, budget mid, {configs[0]} (p50 / p95 ms)", "",
           "| phase | " + " | ".join(_size(s["memories"]) for s in sizes) + " |",
           "|---|" + "---:|" * len(sizes)]
    for name in names:
        cells = []
        for s in sizes:
            p = s["recall"][configs[0]]["mid"]["phases"].get(name)
            cells.append(f"{p['p50']:.1f} / {p['p95']:.1f}" if p else "–")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    """Latency against bank size (log x) beside ingest throughput against bank size.

    :param report: what :func:`~hindsight_recall.bench.scale.run_scale` returns.
    :param path: the PNG to write.
    """
    plt = require_matplotlib()
    sizes = report["sizes"]
    xs = [s["memories"] for s in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    configs = list(sizes[0]["recall"])
    styles = {configs[0]: "-", **({configs[1]: ":"} if len(configs) > 1 else {})}
    for config, style in styles.items():
        for budget, colour in (("low", "tab:green"), ("mid", "tab:blue"), ("high", "tab:red")):
            if budget not in sizes[0]["recall"][config]:
                continue
            p50 = [s["recall"][config][budget]["p50"] for s in sizes]
            left.plot(xs, p50, style, marker="o", color=colour, label=f"{budget} p50, {config}")
            if config == configs[0]:
                p95 = [s["recall"][config][budget]["p95"] for s in sizes]
                left.plot(xs, p95, "--", marker="x", color=colour, alpha=0.6, label=f"{budget} p95, {config}")
    left.set(xscale="log", xlabel="memories in the bank", ylabel="recall latency (ms)",
             title="Recall latency, end to end (rrf, query embedding included)")
    left.set_ylim(bottom=0)
    for target, label in ((60, "target p50 60 ms (100k, mid)"), (100, "target p95 100 ms")):
        left.axhline(target, color="grey", linestyle=":", linewidth=1)
        left.annotate(label, (xs[-1], target), textcoords="offset points", xytext=(-4, 2), fontsize=7,
                      color="grey", ha="right")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    right.plot(xs, [load_and_links(s) for s in sizes], "-o", color="tab:purple", label="load + links")
    right.plot(xs, [s["ingest"]["per_second_without_embedding"] for s in sizes], "-^", color="tab:brown",
               label="load + links + HNSW build")
    right.plot(xs, [s["ingest"]["per_second_with_embedding"] for s in sizes], "-s", color="tab:orange",
               label="everything, with embedding")
    right.axhline(2000, color="grey", linestyle=":", label="target 2,000/s at 100k (without embedding)")
    right.set(xscale="log", yscale="log", xlabel="memories in the bank", ylabel="memories / s",
              title="Bulk ingest throughput (one retain into a new bank)")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8, loc="center", bbox_to_anchor=(0.5, 0.4))  # the gap between the lines
    machine = report["machine"]
    # a run on another server, or over several banks, says so: the axes read "in the bank"
    where, count = sizes[0].get("target", "embedded"), sizes[0].get("banks", 1)
    spread = "" if (where, count) == ("embedded", 1) else f" - {where} server, {count} banks per size"
    fig.suptitle(f"hindsight-recall scale benchmark - {machine['cores']} cores, {machine['cpu']}{spread}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_comparison(report: dict[str, Any], path: Path) -> None:
    """The measured server beside the embedded single node, per size: recall p50 / p95 (all arms,
    budget mid) and throughput at each concurrency.

    :param report: a report with a ``comparison`` (``--compare-embedded``).
    :param path: the PNG to write.
    """
    plt = require_matplotlib()
    rows = report["comparison"]
    target = rows[0]["target"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    labels, measured, embedded = [], [], []
    for c in rows:
        r = next((r for r in c["recall"] if r["config"] == "all arms" and r["budget"] == "mid"), c["recall"][0])
        for k in ("p50", "p95"):
            labels.append(f"{_size(c['memories'])} / {c['banks']} banks\n{k}")
            measured.append(r[f"{k}_ms"])
            embedded.append(r[f"embedded_{k}_ms"])
    _bars(left, labels, measured, embedded, target)
    left.set(ylabel="recall latency (ms)", title="Recall, all arms, budget mid")
    labels, measured, embedded = [], [], []
    for c in rows:
        for t in c["throughput"]:
            labels.append(f"{_size(c['memories'])}\n{t['concurrency']} at once")
            measured.append(t["per_s"])
            embedded.append(t["embedded_per_s"])
    _bars(right, labels, measured, embedded, target)
    right.set(ylabel="recalls / s", title="Throughput, one process")
    fig.suptitle(f"{target} beside the embedded single node - {report['machine']['cores']} cores, "
                 f"{report['machine']['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(axis: Any, labels: list[str], measured: list[float], embedded: list[float], target: str) -> None:
    xs = range(len(labels))
    axis.bar([x - 0.2 for x in xs], measured, 0.4, label=target, color="tab:purple")
    axis.bar([x + 0.2 for x in xs], embedded, 0.4, label="embedded single node", color="tab:grey")
    axis.set_xticks(list(xs), labels, fontsize=7)
    axis.grid(True, axis="y", alpha=0.3)
    axis.legend(fontsize=8)
