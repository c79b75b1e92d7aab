"""The forecast as a picture (issue 24): money in and refunds out per period as bars, the
subscriptions active at each period's end as a line. matplotlib's Agg backend, no display; the
file's suffix names its format (a PNG unless it says .svg or .pdf)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# A suffix -> the format matplotlib writes; a file named without one is a PNG.
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf", "": "png"}


def chart_format(path: Path) -> str | None:
    """The format a chart at `path` is drawn in, None for a suffix no format has."""
    return FORMATS.get(path.suffix.lower())


def write_chart(forecast: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    periods = forecast["periods"]
    labels = [p["periodStart"].strftime("%Y-%m-%d") for p in periods]
    money_in = [p["moneyInCents"] / 100 for p in periods]
    refunds = [-p["refundsOutCents"] / 100 for p in periods]
    active = [p["activeAtEnd"] for p in periods]
    figure, money = pyplot.subplots(figsize=(max(8, len(periods) * 0.35), 5))
    try:
        positions = range(len(periods))
        money.bar(positions, money_in, color="#2e7d32", label="money in")
        money.bar(positions, refunds, color="#c62828", label="refunds out")
        money.axhline(0, color="#555555", linewidth=0.8)
        money.set_ylabel("amount")
        money.set_xticks(list(positions), labels, rotation=60, ha="right", fontsize=8)
        members = money.twinx()
        members.plot(positions, active, color="#1565c0", marker="o", label="active at the end")
        members.set_ylabel("active subscriptions")
        members.set_ylim(bottom=0)
        handles = money.get_legend_handles_labels()
        more = members.get_legend_handles_labels()
        money.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left")
        money.set_title(
            f"Billing forecast until {forecast['until']:%Y-%m-%d} "
            f"(by {forecast['by']}, decline rate {forecast['declineRate']:.0%})"
        )
        figure.tight_layout()
        figure.savefig(path, format=chart_format(path), dpi=100)
    finally:
        pyplot.close(figure)
