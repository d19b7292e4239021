"""The report: a Markdown table, a JSON document and a PNG chart of one evaluation."""

from __future__ import annotations

import base64
import io
import json
import math
import os
from pathlib import Path
from typing import Any

from clef_pipelines.evals.scoring import SystemStatus

_TABLE_COLUMNS = (
    ("ndcg@10", "nDCG@10"),
    ("recall@10", "R@10"),
    ("recall@{top_k}", "R@{top_k}"),
    ("mrr@10", "MRR@10"),
    ("evidence_first", "evidence 1st"),
    ("abstain_unanswerable", "abstain unans."),
    ("abstain_answerable", "abstain ans."),
    ("context_tokens", "ctx tokens"),
    ("clef_requests", "Clef req."),
    ("clef_input_tokens", "Clef tokens"),
    ("clef_cost_usd", "Clef $"),
    ("clef_latency_ms", "Clef ms"),
)


def _fmt(metric: str, value: dict[str, Any] | None) -> str:
    if value is None or math.isnan(value["mean"]):
        return "–"
    mean, low, high = value["mean"], value["low"], value["high"]
    if metric in ("context_tokens", "clef_input_tokens", "clef_latency_ms"):
        return f"{mean:,.0f}"
    if metric == "clef_cost_usd":
        return f"{mean:.6f}"
    if metric == "clef_requests":
        return f"{mean:.2f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def report_document(
    *,
    header: dict[str, Any],
    summary: dict[str, dict[str, dict[str, Any]]],
    statuses: list[SystemStatus],
    extra_sections: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON report: header facts, `systems` (metric means), `intervals`, statuses."""
    return {
        **header,
        "systems": {
            s: {m: round(v["mean"], 6) for m, v in ms.items() if not math.isnan(v["mean"])}
            for s, ms in summary.items()
        },
        "intervals": {
            s: {
                m: [round(v["low"], 6), round(v["high"], 6)]
                for m, v in ms.items()
                if not math.isnan(v["mean"])
            }
            for s, ms in summary.items()
        },
        "queries_per_metric": {s: {m: v["n"] for m, v in ms.items()} for s, ms in summary.items()},
        "unavailable": {s.name: s.reason for s in statuses if not s.available},
        "notes": {s.name: s.note for s in statuses if s.available and s.note},
        **(extra_sections or {}),
    }


def markdown_table(document: dict[str, Any], summary: dict[str, dict[str, dict[str, Any]]]) -> str:
    top_k = document.get("top_k", 20)
    columns = [(m.format(top_k=top_k), label.format(top_k=top_k)) for m, label in _TABLE_COLUMNS]
    # Same column twice when top_k is 10; and columns nobody filled are left out.
    seen: set[str] = set()
    columns = [c for c in columns if not (c[0] in seen or seen.add(c[0]))]
    columns = [c for c in columns if any(c[0] in ms for ms in summary.values())]
    # Clef usage columns only when some system relied on Clef.
    columns = [
        c
        for c in columns
        if not c[0].startswith("clef_")
        or any(ms.get(c[0], {}).get("mean") for ms in summary.values())
    ]
    if not summary:
        columns = columns[:1]
    lines = [
        "| system | " + " | ".join(label for _, label in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for system, metrics in summary.items():
        cells = [_fmt(m, metrics.get(m)) for m, _ in columns]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    for system, reason in document.get("unavailable", {}).items():
        lines.append(f"| {system} | not available: {reason} |" + " |" * (len(columns) - 1))
    return "\n".join(lines)


def markdown_report(
    document: dict[str, Any], summary: dict[str, dict[str, dict[str, Any]]], chart_png: bytes | None
) -> str:
    head = [
        f"## Evaluation: {document['dataset']} ({document['kind']}, split {document['split']})",
        "",
        f"{document.get('queries', 0)} queries ({document.get('judged', 0)} judged, "
        f"{document.get('unanswerable', 0)} unanswerable) over {document.get('documents', 0)} "
        f"documents; collection `{document.get('collection')}`, embedder "
        f"`{document.get('embedder')}`, top_k {document.get('top_k')}, "
        f"context_k {document.get('context_k')}. Means with bootstrap 95% intervals.",
        "",
        f"Clef: {document.get('clef_label', 'off')}",
        "",
        markdown_table(document, summary) if summary or document.get("unavailable") else "",
    ]
    notes = document.get("notes") or {}
    if notes:
        head += ["", *[f"- `{k}`: {v}" for k, v in notes.items()]]
    failures = document.get("clef_failures")
    if failures:
        head += [
            "",
            f"**Clef failed for {failures['queries']} queries** after retries (they fall back to "
            f"vector order, as the query path does): {failures['first_error']}",
        ]
    sweep = document.get("gate_sweep")
    if sweep:
        head += ["", sweep_markdown(sweep)]
    injection = document.get("injections")
    if injection:
        head += ["", injection_markdown(injection)]
    if chart_png:
        encoded = base64.b64encode(chart_png).decode("ascii")
        head += ["", f"![chart](data:image/png;base64,{encoded})"]
    return "\n".join(head).strip() + "\n"


def sweep_markdown(sweep: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    lines = [
        f"### Gate threshold sweep (dev half: {sweep['dev_queries']} queries; chosen "
        f"answer_min {sweep['chosen_answer_min']})",
        "",
        "| answer_min | dev: abstain unans. | dev: abstain ans. | held-out: abstain unans. | "
        "held-out: abstain ans. |",
        "|---|---|---|---|---|",
    ]
    for r in sweep["rows"]:
        mark = "**" if r["answer_min"] == sweep["chosen_answer_min"] else ""
        lines.append(
            f"| {mark}{r['answer_min']:.2f}{mark} | {pct(r['dev_abstain_unanswerable'])} | "
            f"{pct(r['dev_abstain_answerable'])} | {pct(r['held_out_abstain_unanswerable'])} | "
            f"{pct(r['held_out_abstain_answerable'])} |"
        )
    return "\n".join(lines)


def injection_markdown(section: dict[str, Any]) -> str:
    lines = ["### Injections", ""]
    rows = section.get("detectors") or []
    if rows:
        lines += [
            "| detector | recall | false quarantine | threshold | texts | note |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            if r.get("available"):
                lines.append(
                    f"| {r['name']} | {r['recall']:.3f} [{r['recall_ci'][0]:.3f}, "
                    f"{r['recall_ci'][1]:.3f}] | {r['false_quarantine']:.3f} "
                    f"[{r['false_quarantine_ci'][0]:.3f}, {r['false_quarantine_ci'][1]:.3f}] | "
                    f"{r.get('threshold', '')} | {r['texts']} | {r.get('note', '')} |"
                )
            else:
                lines.append(f"| {r['name']} | not available: {r['reason']} | | | | |")
    planted = section.get("planted") or []
    if planted:
        lines += [
            "",
            "| planted into host paragraphs | queries | prompts with a planted instruction | "
            "planted chunks sent | evidence still sent |",
            "|---|---|---|---|---|",
        ]
        for r in planted:
            if r.get("available"):
                lines.append(
                    f"| {r['name']} | {r['queries']} | {r['prompts_reached']} "
                    f"({r['prompts_reached_rate']:.3f}) | {r['planted_chunks_sent']} | "
                    f"{r['evidence_sent_rate']:.3f} |"
                )
            else:
                lines.append(f"| {r['name']} | not available: {r['reason']} | | | |")
    return "\n".join(lines)


def chart_png(summary: dict[str, dict[str, dict[str, Any]]], top_k: int, title: str) -> bytes:
    """Bars of nDCG@10 and recall@top_k per system with their 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")  # no display; this runs inside Dagster steps and CI
    import matplotlib.pyplot as plt

    metrics = [m for m in ("ndcg@10", f"recall@{top_k}", "abstain_unanswerable") if m]
    systems = list(summary)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(systems) + 2), 3.4), dpi=100)
    width = 0.8 / len(metrics)
    for i, metric in enumerate(metrics):
        xs, means, errs = [], [], [[], []]
        for j, system in enumerate(systems):
            v = summary[system].get(metric)
            if not v or math.isnan(v["mean"]):
                continue
            xs.append(j + (i - (len(metrics) - 1) / 2) * width)
            means.append(v["mean"])
            errs[0].append(max(0.0, v["mean"] - v["low"]))
            errs[1].append(max(0.0, v["high"] - v["mean"]))
        if xs:
            ax.bar(xs, means, width, yerr=errs, capsize=3, label=metric)
    ax.set_xticks(range(len(systems)), systems, rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_report_files(
    out_dir: Path, document: dict[str, Any], markdown: str, png: bytes | None
) -> dict[str, Path]:
    """report.md, report.json and report.png, each written whole (temp name, then rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "report.md", "json": out_dir / "report.json"}
    payloads: dict[str, bytes] = {
        "markdown": markdown.encode("utf-8"),
        "json": json.dumps(document, indent=2, sort_keys=False, default=str).encode("utf-8"),
    }
    if png:
        paths["chart"] = out_dir / "report.png"
        payloads["chart"] = png
    for key, path in paths.items():
        tmp = path.with_suffix(path.suffix + f".tmp-{os.getpid()}")
        tmp.write_bytes(payloads[key])
        os.replace(tmp, path)
    return paths
