"""evoteam's figures: matplotlib figures drawn by Agg, one look for every plot.

A figure is a bare `matplotlib.figure.Figure`, not pyplot's: pyplot's import (its backend machinery, its registry of
open figures) cost 0.57 of a tracked main job's 10 CPU-s, and a figure nobody registered needs no closing."""

from __future__ import annotations

import logging
from pathlib import Path


def figure(width: float, height: float):
    """(figure, axes): a figure of `width` x `height` inches at 100 dpi, drawn by Agg (no display needed), with one
    axes; matplotlib's font-cache notice kept quiet."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def save_axes(fig, ax, xlabel: str, ylabel: str, title: str, path: Path) -> None:
    """Label, grid and write a plot the same way for every evoteam figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def plot_steps(points: list[tuple[float, float]], xlabel: str, title: str, path: Path,
               marks: list[tuple[float, str]] = ()) -> None:
    """Best speedup as a step line (the running maximum) against `xlabel`, with vertical `marks`
    (x, label), e.g. where a new team took over; PNG through Agg."""
    fig, ax = figure(6.4, 4.0)
    if points:
        xs, ys = zip(*points)
        ax.step(xs, ys, where="post", marker="o", markersize=3)
        if max(ys) >= 0.5:  # the baseline's level, where it does not flatten the curve
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--", label="baseline")
    else:
        ax.text(0.5, 0.5, "no verified, timed kernel", ha="center", va="center", transform=ax.transAxes)
    for x, label in marks:
        ax.axvline(x, color="C1", linewidth=0.8, linestyle=":")
        ax.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, ha="right", va="top",
                    fontsize=7, color="C1")
    ax.xaxis.get_major_locator().set_params(integer=True)  # evaluations and tokens are counts
    save_axes(fig, ax, xlabel, "best verified geomean speedup (x)", title, path)
