# Chart extraction for the Python kernel: a display formatter that describes a matplotlib Figure as
# the `chart` @e2b/code-interpreter reads from a result (its Chart types: line, scatter, bar, pie,
# box_and_whisker, superchart for several axes, unknown for the rest), beside the PNG the inline
# backend renders.
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


def _floats(values):
    return [float(_value(v)) for v in values]


def _no_line(line):
    return str(line.get_linestyle()).lower() in ("none", "", " ")


def _one_box(lines, vertical):
    """The stats of one box of Axes.boxplot's default drawing (its 7 lines: box, lower and upper
    whisker, lower and upper cap, median, fliers), read in the box's orientation; None when the
    lines are not that."""
    xy = [(_floats(l.get_xdata()), _floats(l.get_ydata())) for l in lines]
    if not vertical:
        xy = [(y, x) for x, y in xy]
    (bx, by), (wlx, wly), (whx, why), (clx, cly), (chx, chy), (mx, my), (fx, fy) = xy
    rect = len(bx) == 5 and bx[0] == bx[3] == bx[4] and bx[1] == bx[2] and by[0] == by[1] == by[4] and by[2] == by[3]
    if not rect or not all(len(v) == 2 for v in (wlx, wly, whx, why, clx, cly, chx, chy, mx, my)):
        return None
    pos = (bx[0] + bx[1]) / 2
    whiskers = wlx[0] == wlx[1] == whx[0] == whx[1] and abs(wlx[0] - pos) < 1e-9 and wly[0] == by[0] and why[0] == by[2]
    caps = cly[0] == cly[1] == wly[1] and chy[0] == chy[1] == why[1]
    median = my[0] == my[1] and sorted(mx) == sorted(bx[:2])
    if not (whiskers and caps and median and _no_line(lines[6]) and all(x == pos for x in fx)):
        return None
    return pos, {"min": wly[1], "first_quartile": by[0], "median": my[0], "third_quartile": by[2], "max": why[1], "outliers": fy}


def _boxes(ax):
    """A box_and_whisker chart when the Axes' lines are only boxplot()'s default boxes, else None.
    matplotlib keeps no record of a boxplot on the Axes: its artists are plain lines, so they are
    recognised by their shape (vert=False draws the same lines with x and y swapped)."""
    lines = ax.get_lines()
    if not lines or len(lines) % 7 or ax.patches or ax.collections:
        return None
    for vertical in (True, False):
        boxes = [_one_box(lines[i : i + 7], vertical) for i in range(0, len(lines), 7)]
        if all(boxes):
            axis = ax.xaxis if vertical else ax.yaxis
            ticks = {round(float(loc), 6): t.get_text() for loc, t in zip(axis.get_ticklocs(), axis.get_ticklabels())}
            chart = _axes2d(ax, "box_and_whisker")
            for pos, stats in boxes:
                chart["elements"].append({"label": ticks.get(round(pos, 6)) or f"{pos:g}", **stats})
            return chart
    return None


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
    if kinds == ["line"]:
        return _boxes(ax) or _line(ax)
    return _scatter(ax)


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
