"""Colours of every slimgraph view: engines, update_graph phases, the rest.

One module, so the app, the scheduler tab, its individual pages and the
notebooks draw the same thing in the same colour:

- **Engines** (:data:`ENGINE_COLORS`): stock vermillion, slim blue, the
  Okabe-Ito pair that stays apart under every kind of colour-vision
  deficiency. Lines, bars and tints that stand for an engine use these,
  and no phase does.
- **Phases** (:data:`PHASE_COLORS`, :data:`PHASE_HATCHES`): one fixed
  colour per update_graph phase (and light grey for ``other``, the time no
  phase covers), in every figure. Twelve colours cannot all be far apart
  for every viewer, so the colour is not the only cue: the phases whose
  colours come closest also differ in hatch pattern, and every chart that
  stacks phases has a legend and names the phase on hover.
- **Per-engine charts** (an engine's memory icicle, its lazy containers)
  draw in that engine's colour and its tints (:func:`engine_tint`: mixed
  with white, light enough for dark labels); what stock's eager sets would
  hold is :data:`EAGER_COLOR`, a neutral grey, dashed.
- **Categories without a fixed meaning** (a notebook's memory-tree nodes):
  :func:`categorical`, the Cividis map (made for colour-vision
  deficiencies), never a phase's or an engine's colour.

How the phase colours were chosen: from Paul Tol's "muted" and "light"
schemes, the 12 that maximize the smallest pairwise distance (CIE76 ΔE in
CIELAB) under normal vision and simulated protanopia, deuteranopia and
tritanopia (Machado, Oliveira & Fernandes 2009, severity 1, applied in
linear sRGB) while staying at least 13 ΔE from both engine colours. The
smallest distance between two phases' colours is 11.9 ΔE (mint vs pink,
deuteranopia); every pair under 15 ΔE differs in hatch (the closest, 10.9 ΔE, is ``commit``
against ``other``'s grey under deuteranopia; both engines are 13.5 ΔE or
more from every phase). :func:`worst_distance` recomputes these
figures, and tests/test_views.py holds the palette to them.
"""
from __future__ import annotations

import math

from slimgraph.instrument.blame import CAUSES
from slimgraph.instrument.records import PHASES

#: The colour of each engine, wherever a view stands for one.
ENGINE_COLORS = {"stock": "#D55E00", "slim": "#0072B2"}

#: Fixed phase colours, in :data:`~slimgraph.instrument.records.PHASES`
#: order, then ``other``.
PHASE_COLORS = {
    "deserialize": "#DDCC77",  # sand
    "materialize": "#332288",  # indigo
    "cull": "#99DDFF",  # light cyan
    "lost_dependencies": "#BBCC33",  # pear
    "order": "#117733",  # green
    "task_states": "#CC6677",  # rose
    "annotations": "#77AADD",  # light blue
    "priorities": "#882255",  # wine
    "who_wants": "#44BB99",  # mint
    "transitions": "#999933",  # olive
    "plugins": "#CC79A7",  # pink
    "commit": "#FFAABB",  # light pink
    "other": "#DDDDDD",  # the time no phase covers
}
assert tuple(PHASE_COLORS)[: len(PHASES)] == PHASES, "a phase without a colour"

#: Hatch patterns (Bokeh's names; " " is none) that tell apart the phases
#: whose colours are closest (see the module docstring).
PHASE_HATCHES = dict.fromkeys(PHASE_COLORS, " ")
PHASE_HATCHES.update({"lost_dependencies": ".", "who_wants": "/", "commit": "\\"})

#: The cause of an event-loop block (:mod:`slimgraph.instrument.blame`),
#: in the blocks strip: the engine's own ingestion stands out (magenta),
#: dask's own calls beside it (purple), the rest in quieter colours; none
#: is an engine's colour, and the strip's hover and legend name the cause.
CAUSE_COLORS = {
    "ingestion": "#EE3377",  # magenta
    "dask's own": "#AA4499",  # purple
    "engine": "#009988",  # teal
    "garbage collection": "#222255",  # navy
    "instruments": "#99DDFF",  # light cyan
    "other handler": "#EECC66",  # yellow
    "other thread": "#997700",  # ochre
    "no CPU": "#BBCC33",  # pear: the machine ran other processes
    "unknown": "#BBBBBB",  # grey
}
assert set(CAUSE_COLORS) == set(CAUSES), "a cause without a colour"

#: A graph's stages (:data:`slimgraph.instrument.stages.STAGES`), shaded
#: behind the scheduler CPU chart: Paul Tol's pale colours, under the
#: engines' lines; none a phase's or an engine's colour.
STAGE_COLORS = {
    "ingest": "#EEEEBB",  # pale yellow
    "run": "#CCDDAA",  # pale green
    "release": "#FFCCCC",  # pale red
}

#: What stock's eager sets would hold (a dashed line beside an engine's own).
EAGER_COLOR = "#777777"

#: Empty space, axes' "nothing here" text, notes.
MUTED = "#666666"

#: The simulated kinds of vision :func:`worst_distance` checks.
VISIONS = ("normal", "protanopia", "deuteranopia", "tritanopia")

# Machado, Oliveira & Fernandes (2009), severity 1.0, on linear sRGB.
_CVD = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                   (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602),
                   (0.004733, 0.691367, 0.303900)),
}  # fmt: skip


def engine_color(kind: str) -> str:
    """An engine's colour (black for a kind that is neither)."""
    return ENGINE_COLORS.get(kind, "#000000")


def _rgb(hex_color: str) -> tuple[int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def mix(hex_color: str, white: float) -> str:
    """``hex_color`` mixed with ``white`` (0: unchanged, 1: white)."""
    r, g, b = (round(c + (255 - c) * white) for c in _rgb(hex_color))
    return f"#{r:02X}{g:02X}{b:02X}"


#: How much white the branches of an icicle get, branch by branch.
_TINTS = (0.25, 0.55, 0.4, 0.7, 0.3, 0.6, 0.45, 0.75)


def engine_tint(kind: str, i: int) -> str:
    """The ``i``-th branch colour of ``kind``'s memory icicle: the engine's
    colour, lightened (always light enough for dark labels)."""
    return mix(engine_color(kind), _TINTS[i % len(_TINTS)])


def categorical(n: int) -> list[str]:
    """``n`` colours for categories that have no fixed colour (Cividis, dark
    to light)."""
    from bokeh.palettes import cividis

    return list(cividis(max(n, 1)))[:n]


# -- checking the palette ---------------------------------------------------------
def _linear(c: float) -> float:
    c /= 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _lab(hex_color: str, vision: str = "normal") -> tuple[float, float, float]:
    rgb = [_linear(c) for c in _rgb(hex_color)]
    if vision != "normal":
        m = _CVD[vision]
        rgb = [min(max(sum(m[i][j] * rgb[j] for j in range(3)), 0.0), 1.0) for i in range(3)]
    r, g, b = rgb
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def distance(a: str, b: str, vision: str = "normal") -> float:
    """CIE76 ΔE between two colours as seen with ``vision`` (see :data:`VISIONS`)."""
    return math.dist(_lab(a, vision), _lab(b, vision))


def worst_distance(a: str, b: str) -> float:
    """The smallest :func:`distance` of two colours over :data:`VISIONS`."""
    return min(distance(a, b, v) for v in VISIONS)
