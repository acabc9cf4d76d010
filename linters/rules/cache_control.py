"""``cache_control`` in literal Anthropic-style requests.

PC005: misuse -- more breakpoints in one request than Anthropic accepts
(:data:`promptcache.limits.ANTHROPIC_MAX_BREAKPOINTS`), a ``1h`` breakpoint after a ``5m``
one (longer TTLs must come first in tools -> system -> messages order), a TTL other than
:data:`promptcache.limits.ANTHROPIC_TTLS`, or a ``type`` other than ``ephemeral``.
The markers that a known request ignores or rejects (a misspelt key, a raw ``cachePoint``
through litellm, a marker on a text that can be empty or on a block that can be a thinking
block) are PC005 too: :mod:`linters.rules.marker_misuse`.
PC008: a breakpoint on a literal prefix too short to be cached for the model: the request
pays full price every time while the code looks cached.

Every figure (breakpoint count, TTLs, per-model minimum cacheable length) is read from
:mod:`promptcache.limits`, which cites the pages and the date they were read.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

from linters.flow.facts import Scope
from linters.flow.resolve import short
from linters.flow.values import Evaluator
from linters.model import Finding, Rule
from linters.rules import marker_misuse
from linters.rules.context import RuleContext
from promptcache.limits import (
    ANTHROPIC_DEFAULT_MIN_TOKENS,
    ANTHROPIC_MAX_BREAKPOINTS,
    ANTHROPIC_TTLS,
    cache_limits,
)

# "'5m' (default) or '1h'"
_TTL_WORDS = " or ".join([f"{ANTHROPIC_TTLS[0]!r} (default)", *map(repr, ANTHROPIC_TTLS[1:])])

RULES = (
    Rule(
        "PC005",
        "cache-control-misuse",
        f"`cache_control` misuse in a literal request: more than {ANTHROPIC_MAX_BREAKPOINTS} "
        "breakpoints, a 1h breakpoint after a 5m one, an unknown TTL or type; a marker the "
        "client ignores (a misspelt key, a raw `cachePoint` through litellm) or the API "
        "rejects (on a text that can be empty, on a block that can be `thinking`)",
    ),
    Rule(
        "PC008",
        "breakpoint-below-minimum",
        "`cache_control` on a literal prefix shorter than the model's minimum cacheable length",
    ),
)

# An upper bound on tokens: no tokenizer we know averages fewer than 2.5 UTF-8 bytes per
# token on prose or JSON, so a prefix estimated below the minimum really is below it.
BYTES_PER_TOKEN_UPPER = 2.5
# Tokens Anthropic adds when tools are present (tool-use system prompt, 346 for
# tool_choice auto/none on current models; the largest listed), counted to stay conservative.
TOOLS_OVERHEAD_TOKENS = 346


class _BP:
    __slots__ = ("node", "ttl", "type", "prefix_bytes")

    def __init__(
        self, node: Any, ttl: str | None, type_: str | None, prefix_bytes: int | None
    ) -> None:
        self.node = node
        self.ttl = ttl
        self.type = type_
        self.prefix_bytes = prefix_bytes


class _Walk:
    """Walks one request's literal structure in cache order, tracking the prefix size."""

    def __init__(self, ev: Evaluator) -> None:
        self.ev = ev
        self.size: int | None = 0  # UTF-8 bytes of prefix so far, None once unknown
        self.bps: list[_BP] = []
        self.tools = False

    def add(self, n: Any) -> None:
        if self.size is not None:
            self.size = None if n is None else self.size + n

    def items(self, node: Any, scope: Scope, depth: int = 0) -> Any:
        """Elements of a literal list, names followed; None when not literal."""
        t = type(node)
        if t in (ast.List, ast.Tuple):
            return [(e, scope) for e in node.elts]
        if t is ast.Name and depth < 6:
            bl = self.ev.resolve(node.id, scope, node.lineno)
            if len(bl) == 1 and bl[0].kind == "assign":
                return self.items(bl[0].value, bl[0].scope, depth + 1)
        if t is ast.BinOp and type(node.op) is ast.Add:
            a = self.items(node.left, scope, depth + 1)
            b = self.items(node.right, scope, depth + 1)
            return None if a is None or b is None else a + b
        return None

    def as_dict(self, node: Any, scope: Scope, depth: int = 0) -> Any:
        if type(node) is ast.Dict:
            return node, scope
        if type(node) is ast.Name and depth < 6:
            bl = self.ev.resolve(node.id, scope, node.lineno)
            if len(bl) == 1 and bl[0].kind == "assign":
                return self.as_dict(bl[0].value, bl[0].scope, depth + 1)
        return None, scope

    def marker(self, d: Any, scope: Scope) -> None:
        """Record the block's ``cache_control`` (if any) at the current prefix size."""
        for k, v in zip(d.keys, d.values):
            if type(k) is ast.Constant and k.value == "cache_control":
                try:
                    spec = self.ev.literal_obj(v, scope)
                except LookupError:
                    spec = None
                if spec is None and type(v) is ast.Constant:
                    return  # cache_control=None: no breakpoint
                ttl = typ = None
                if isinstance(spec, dict):
                    ttl = spec.get("ttl", "5m")
                    typ = spec.get("type")
                self.bps.append(_BP(k, ttl, typ, self.size))
                return

    def text_len(self, node: Any, scope: Scope) -> Any:
        s = self.ev.literal_str(node, scope)
        return None if s is None else len(s.encode("utf-8"))

    def block(self, node: Any, scope: Scope) -> None:
        d, dscope = self.as_dict(node, scope)
        if d is None:
            if type(node) is ast.Starred:
                self.add(None)
                return
            self.add(self.text_len(node, scope))
            return
        text = None
        kind = None
        for k, v in zip(d.keys, d.values):
            if type(k) is ast.Constant:
                if k.value == "text":
                    text = v
                elif k.value == "type":
                    kind = v.value if type(v) is ast.Constant else None
        if text is not None:
            self.add(self.text_len(text, dscope))
        elif kind in ("image", "document", "tool_use", "tool_result", None):
            self.add(None)
        self.marker(d, dscope)

    def tool(self, node: Any, scope: Scope) -> None:
        self.tools = True
        d, dscope = self.as_dict(node, scope)
        if d is None:
            self.add(None)
            return
        try:
            obj = self.ev.literal_obj(d, dscope)
            obj.pop("cache_control", None)
            self.add(len(json.dumps(obj, sort_keys=True).encode("utf-8")))
        except (LookupError, TypeError, ValueError, AttributeError):
            self.add(None)
        self.marker(d, dscope)

    def content(self, node: Any, scope: Scope) -> None:
        elems = self.items(node, scope)
        if elems is None:
            self.add(self.text_len(node, scope))
            return
        for e, s in elems:
            self.block(e, s)

    def message(self, node: Any, scope: Scope) -> None:
        d, dscope = self.as_dict(node, scope)
        if d is None:
            self.add(None)
            return
        for k, v in zip(d.keys, d.values):
            if type(k) is ast.Constant and k.value == "content":
                self.content(v, dscope)
        self.marker(d, dscope)

    def run(self, req: Any) -> Any:
        parts, scope = req.parts, req.scope
        for key, each in (("tools", self.tool), ("system", self.block), ("messages", self.message)):
            node = parts.get(key)
            if node is None:
                continue
            if key == "system" and self.items(node, scope) is None:
                self.add(self.text_len(node, scope))
                continue
            elems = self.items(node, scope)
            if elems is None:
                self.add(None)
                continue
            for e, s in elems:
                each(e, s)
        return self.bps


def _min_tokens(model: str | None) -> int:
    """The model's minimum cacheable length in tokens (:func:`promptcache.limits.cache_limits`);
    for an unknown model no more than Anthropic's default, so that a finding stays certain."""
    if not model:
        return ANTHROPIC_DEFAULT_MIN_TOKENS
    rules = cache_limits(
        model,
        "bedrock" if model.startswith(("anthropic.", "us.anthropic.", "eu.")) else "anthropic",
    )
    if not rules.known:
        return min(rules.min_tokens or ANTHROPIC_DEFAULT_MIN_TOKENS, ANTHROPIC_DEFAULT_MIN_TOKENS)
    return rules.min_tokens or ANTHROPIC_DEFAULT_MIN_TOKENS


def check(an: RuleContext) -> list[Finding]:
    """PC005 and PC008 findings for every literal request of the module."""
    facts = an.facts
    out: list[Finding] = marker_misuse.findings(an)
    if not facts.has_cache_control:
        return out
    out += [
        an.finding(
            "PC005",
            lm.mark,
            f"`cache_control` is set on every item of `{short(lm.iterable)}`"
            + (
                f" (through `{lm.helper}()`, which sets it on line {lm.helper_line})"
                if lm.helper
                else ""
            )
            + f": with more than {ANTHROPIC_MAX_BREAKPOINTS} items the request carries more "
            f"than {ANTHROPIC_MAX_BREAKPOINTS} breakpoints and the API rejects it; mark only "
            "the last item (or count the markers)",
        )
        for lm in facts.loop_breakpoints
    ]
    if not facts.requests:
        return out
    ev = an.ev
    for req in facts.requests:
        walk = _Walk(ev)
        bps = walk.run(req)
        if not bps:
            continue
        model_node = req.parts.get("model")
        model = ev.literal_str(model_node, req.scope) if model_node is not None else None
        minimum = _min_tokens(model)
        shorter = None
        for i, bp in enumerate(bps):
            if id(bp.node) in an.reported:
                continue
            if i == ANTHROPIC_MAX_BREAKPOINTS:
                out.append(
                    an.finding(
                        "PC005",
                        bp.node,
                        f"cache breakpoint number {i + 1} of {len(bps)}: a request may carry at most "
                        f"{ANTHROPIC_MAX_BREAKPOINTS} (counted tools -> system -> messages); "
                        "the API rejects it",
                    )
                )
                continue
            if bp.type is not None and bp.type != "ephemeral":
                out.append(
                    an.finding(
                        "PC005",
                        bp.node,
                        f"cache_control type {bp.type!r}: the only type is 'ephemeral'",
                    )
                )
                continue
            if bp.ttl is not None and bp.ttl not in ANTHROPIC_TTLS:
                out.append(
                    an.finding(
                        "PC005",
                        bp.node,
                        f"cache_control ttl {bp.ttl!r}: use {_TTL_WORDS}",
                    )
                )
                continue
            if bp.ttl == "1h" and shorter is not None:
                out.append(
                    an.finding(
                        "PC005",
                        bp.node,
                        f"a 1h breakpoint after a 5m one (line {shorter.node.lineno}): longer TTLs "
                        "must come first in tools -> system -> messages order; the API rejects it",
                    )
                )
                continue
            if bp.ttl == "5m" and shorter is None:
                shorter = bp
            if bp.prefix_bytes is not None:
                upper = math.ceil(bp.prefix_bytes / BYTES_PER_TOKEN_UPPER)
                if walk.tools:
                    upper += TOOLS_OVERHEAD_TOKENS
                if upper < minimum:
                    out.append(
                        an.finding(
                            "PC008",
                            bp.node,
                            f"this breakpoint caches a prefix of at most ~{upper} tokens, below the "
                            f"{minimum}-token minimum for {model or 'Claude models'}: nothing is "
                            "cached and every request pays full input price; cache a longer prefix "
                            "or drop the marker",
                        )
                    )
    return out
