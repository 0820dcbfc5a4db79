# Chart extraction for the Python kernel: a display formatter that describes a matplotlib Figure as
# the `chart` @e2b/code-interpreter reads from a result (its Chart types: line, scatter, bar, pie,
# superchart for several axes, unknown for the rest), beside the PNG the inline backend renders.
#
# register() runs once in each kernel at its start. The formatter knows a Figure by its class's
# name, so a kernel that never imports matplotlib never loads it (importing pyplot took 1.5 s here), and it keeps no
# printer in IPython's registry: the inline backend, set up at the first pyplot import, removes
# every Figure printer from every formatter.
import datetime
import numbers

MIME = "application/vnd.cube.chart+json"


def _value(v):
    """A number or a string: what the SDK's point, tick and pie types hold."""
    if hasattr(v, "item") and not isinstance(v, str):
        v = v.item()  # numpy scalars, numpy.datetime64
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    return str(v)


def _label(artist):
    # matplotlib names unlabelled artists "_child0", "_line1"...: not a label the user gave.
    label = artist.get_label()
    return "" if label is None or str(label).startswith("_") else str(label)


def _scale(axis):
    from matplotlib import category, dates

    if isinstance(axis.get_major_formatter(), (dates.AutoDateFormatter, dates.DateFormatter, dates.ConciseDateFormatter)):
        return "datetime"
    if isinstance(axis.get_units(), category.UnitData):
        return "categorical"
    return axis.get_scale()


def _axes2d(ax, kind):
    return {"type": kind, "title": ax.get_title(), "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel(), "elements": []}


def _ticks(ax, chart):
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        chart[f"{name}_ticks"] = [_value(t) for t in axis.get_ticklocs()]
        chart[f"{name}_tick_labels"] = [t.get_text() for t in axis.get_ticklabels()]
        chart[f"{name}_scale"] = _scale(axis)
    return chart


def _line(ax):
    chart = _ticks(ax, _axes2d(ax, "line"))
    for line in ax.get_lines():
        points = [[_value(x), _value(y)] for x, y in zip(line.get_xdata(), line.get_ydata())]
        chart["elements"].append({"label": _label(line), "points": points})
    return chart


def _scatter(ax):
    chart = _ticks(ax, _axes2d(ax, "scatter"))
    for coll in ax.collections:
        # Offsets are in data coordinates, already converted from dates or categories to numbers.
        points = [[_value(x), _value(y)] for x, y in coll.get_offsets()]
        chart["elements"].append({"label": _label(coll), "points": points})
    return chart


def _bar(ax, containers):
    chart = _axes2d(ax, "bar")
    vertical = all(getattr(c, "orientation", "vertical") == "vertical" for c in containers)
    axis = ax.xaxis if vertical else ax.yaxis
    # The bar's label is its category (the tick label at its centre), else its position.
    ticks = {round(float(loc), 6): t.get_text() for loc, t in zip(axis.get_ticklocs(), axis.get_ticklabels())}
    for container in containers:
        for bar in container:
            x, y, w, h = bar.get_x(), bar.get_y(), bar.get_width(), bar.get_height()
            centre, value = (x + w / 2, h) if vertical else (y + h / 2, w)
            label = ticks.get(round(centre, 6)) or f"{centre:g}"
            # BarData's value is a string in the SDK's types.
            chart["elements"].append({"label": label, "value": str(_value(value)), "group": _label(container)})
    return chart


def _pie(ax, wedges):
    chart = {"type": "pie", "title": ax.get_title(), "elements": []}
    for w in wedges:
        # pie(labels=...) gives each wedge its label; angles in degrees, as matplotlib keeps them.
        chart["elements"].append({"label": _label(w), "angle": _value(w.theta2 - w.theta1), "radius": _value(w.r)})
    return chart


def axes_chart(ax):
    """The chart one Axes draws, or type 'unknown' when it is not (only) one kind the SDK names."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.patches import Wedge

    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    lines = ax.get_lines()
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    others = ax.images or [c for c in ax.collections if not isinstance(c, PathCollection)]
    kinds = [k for k, present in (("pie", wedges), ("bar", bars), ("line", lines), ("scatter", points)) if present]
    if others or len(kinds) != 1:
        return {"type": "unknown", "title": ax.get_title(), "elements": []}
    if kinds == ["pie"]:
        return _pie(ax, wedges)
    if kinds == ["bar"]:
        return _bar(ax, bars)
    return _line(ax) if kinds == ["line"] else _scatter(ax)


def figure_chart(fig):
    axes = [ax for ax in fig.axes if ax.axison or ax.patches]  # axis('off') hides one, unless it holds a pie
    if len(axes) == 1:
        return axes_chart(axes[0])
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    if not axes:
        return {"type": "unknown", "title": title, "elements": []}
    return {"type": "superchart", "title": title, "elements": [axes_chart(ax) for ax in axes]}


def _format(fig):
    try:
        return figure_chart(fig)
    except Exception:  # a figure this does not understand still shows as its PNG
        return {"type": "unknown", "title": "", "elements": []}


def _is_figure(obj):
    return any(c.__name__ == "Figure" and c.__module__ == "matplotlib.figure" for c in type(obj).__mro__)


def register(ip):
    from IPython.core.formatters import BaseFormatter

    class ChartFormatter(BaseFormatter):
        format_type = MIME
        _return_type = dict

        def __call__(self, obj):
            return _format(obj) if self.enabled and _is_figure(obj) else None

    ip.display_formatter.formatters[MIME] = ChartFormatter(parent=ip.display_formatter)
