"""PC012: text read from a lossy view of content blocks and written back through its setter.

A property's getter gives the text of structured content blocks; its setter turns a str into
one text block that replaces them. Reading the text, editing it and assigning it back drops
every other block, a cache breakpoint (``cachePoint``, ``cache_control``) among them, so no
later request carries that breakpoint. Facts from :mod:`linters.flow.lossy_writes`.
"""

from __future__ import annotations

from linters.flow.lossy_writes import lossy_writes
from linters.model import Finding, Rule
from linters.rules.context import RuleContext

RULES = (
    Rule(
        "PC012",
        "breakpoint-dropped-by-text-setter",
        "text read from a property's str view of content blocks and assigned back: the setter "
        "replaces the blocks, a cache breakpoint among them, with one text block",
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC012 findings: one per write of the view's own text back through its setter."""
    if not an.facts.attr_writes:
        return []
    out = []
    for w in lossy_writes(an.ev):
        if id(w.node) in an.reported:
            continue
        s = w.setter
        prop = f"{w.obj}.{s.prop}"
        public = sorted(v for v in s.views if not v.startswith("_"))
        edit = f"`{w.obj}.{public[0]}`" if public else f"a list of `{s.element}`"
        out.append(
            an.finding(
                "PC012",
                w.node,
                f"`{prop}` is read as text (line {w.read_line}) and text is assigned back: "
                f"the setter of `{s.cls}.{s.prop}` ({s.path}:{s.setter_line}) replaces the "
                f"content blocks in `{s.blocks}` with one text block (`{s.block}`, line "
                f"{s.block_line} there), so a breakpoint among them (`{s.marker}`, a key of "
                f"`{s.element}`, {s.element_path}:{s.marker_line}) is dropped and no later "
                f"request carries that breakpoint (the blocks are read at "
                f"{s.read[0]}:{s.read[1]}); edit the blocks ({edit}) and assign the list "
                "instead",
            )
        )
    return out
