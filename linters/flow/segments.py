"""Segments: a value's text as an ordered sequence of static text, per-request text and
unknown parts, for the rules about what comes first (PC004, PC007, whole-prompt PC001).

Segment kinds: ``("s", chars)`` static (``None`` chars: a file's contents, unknown but
large), ``("d", node, why)`` per-request, ``("v", node, why)`` volatile, ``("u",)`` unknown.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Sequence
from typing import Any

from linters.flow import tables
from linters.flow.facts import ASSIGN, AUG, ITER, PARAM, UNPACK, WITH, Scope
from linters.flow.literals import LiteralMixin
from linters.flow.resolve import is_template, short

# Segment kinds (the first item of a segment tuple): literal text, a per-request value, a
# value that changes on every call (a clock, a uuid), and a value the linter cannot see.
# Not the hazard kinds of linters.flow.hazards (HAZARD_*), which name what flows into a value.
SEG_STATIC, SEG_DYNAMIC, SEG_VOLATILE, SEG_UNKNOWN = "s", "d", "v", "u"
_U = (SEG_UNKNOWN,)
_MAX_DEPTH = 24
_FORMATTER = string.Formatter()
_PERCENT_RE = re.compile(r"%%|%(\([^)]*\))?[-#0 +]*(\*|\d+)?(\.(\*|\d+))?[hlL]?[diouxXeEfFgGcrsa]")


def classify(segs: Sequence[Any]) -> str:
    """``"d"`` if any part is per-request or volatile, ``"s"`` if all parts are static,
    else ``"u"``."""
    kind = SEG_STATIC
    for s in segs:
        k = s[0]
        if k == SEG_DYNAMIC or k == SEG_VOLATILE:
            return SEG_DYNAMIC
        if k == SEG_UNKNOWN:
            kind = SEG_UNKNOWN
    return kind


def static_chars(segs: Sequence[Any]) -> int | None:
    """Total static characters (None stands for file contents: unknown but large)."""
    total = 0
    for s in segs:
        if s[0] == SEG_STATIC:
            if s[1] is None:
                return None
            total += s[1]
    return total


_MARKUP = frozenset("{}<>;=|\\")
CODE_SUFFIXES = (
    ".css",
    ".html",
    ".htm",
    ".js",
    ".ts",
    ".json",
    ".xml",
    ".svg",
    ".csv",
    ".yaml",
    ".yml",
    ".toml",
    ".ini",
    ".py",
)


def looks_like_prose(text: str) -> bool:
    """True for natural-language text (a manual, a policy, a prompt) rather than code or
    markup (CSS, HTML, JSON): letters and spaces dominate and markup characters are rare."""
    if not text:
        return False
    n = len(text)
    markup = sum(1 for c in text if c in _MARKUP)
    words = sum(1 for c in text if c.isalpha() or c.isspace())
    return markup / n < 0.03 and words / n > 0.75


class SegmentMixin(LiteralMixin):
    """Segment questions; mixed into :class:`linters.flow.values.Evaluator`."""

    def _prose_file(self, recv: Any, scope: Scope) -> bool:
        """Whether a file read at run time holds prose: False for code and markup suffixes
        (``.css``, ``.html``, ``.json``, ...) when the path is a literal, else True."""
        node = recv
        while True:
            t = type(node)
            if t is ast.Call and node.args:
                node = node.args[0]
            elif t is ast.BinOp and type(node.op) is ast.Div:
                node = node.right
            else:
                break
        path = self.literal_str(node, scope)
        return not (path or "").lower().endswith(CODE_SUFFIXES)

    def _file_handle(self, recv: Any, scope: Scope) -> bool:
        """Whether ``recv.read()`` reads a file: ``open(...)`` (directly or bound by
        ``with open(...) as f`` / ``f = open(...)``) or a path (``read_text``/``read_bytes``
        are path methods). A process pipe or a socket (``proc.stderr.read()``) is not."""
        node = recv
        if type(node) is ast.Name:
            bl = self.resolve(node.id, scope, node.lineno)
            node = bl[0].value if len(bl) == 1 and bl[0].value is not None else node
        if type(node) is ast.Call:
            q = self.facts.qualname(node.func) or ""
            return (
                q in ("builtins.open", "io.open", "codecs.open")
                or q.endswith(("Path", "resources.files"))
                or getattr(node.func, "attr", "") in ("open", "joinpath")
            )
        return type(node) is ast.BinOp and type(node.op) is ast.Div  # Path(...) / "name"

    def segments(self, node: Any, scope: Scope) -> tuple:
        """``node``'s text as ordered parts: ("s", chars), ("d", node, why), ("v", node,
        why), ("u",)."""
        key = id(node)
        got = self._seg.get(key)
        if got is not None:
            return got
        if key in self._active_seg or len(self._active_seg) > _MAX_DEPTH * 4:
            return _U
        self._active_seg.add(key)
        try:
            res = tuple(self._segments(node, scope))
        finally:
            self._active_seg.discard(key)
        self._seg[key] = res
        return res

    def _segments(self, node: Any, scope: Scope) -> Any:
        t = type(node)
        if t is ast.Constant:
            v = node.value
            if v is None:
                return ()
            if type(v) is str:
                return (
                    (SEG_STATIC, len(v), looks_like_prose(v))
                    if len(v) >= 200
                    else (SEG_STATIC, len(v)),
                )
            return ((SEG_STATIC, len(str(v))),)
        if t is ast.JoinedStr:
            out: list[tuple[Any, ...]] = []
            for v in node.values:
                if type(v) is ast.Constant:
                    out.append((SEG_STATIC, len(str(v.value))))  # f-string literal parts: str
                else:
                    out.extend(self.segments(v.value, scope))
            return out
        if t is ast.BinOp:
            op = type(node.op)
            if op is ast.Add:
                return self.segments(node.left, scope) + self.segments(node.right, scope)
            if op is ast.Mod:
                return self._seg_percent(node, scope)
            if op is ast.Mult:
                text = self.literal_str(node, scope)
                if text is not None:
                    return ((SEG_STATIC, len(text), looks_like_prose(text[:2000])),)
            return _U
        if t is ast.Name:
            return self._seg_name(node, scope)
        if t is ast.Attribute:
            return self._seg_attribute(node, scope)
        if t is ast.Subscript:
            if self._request_id_key(node.slice):
                return ((SEG_VOLATILE, node, f"`{short(node)}` (a per-request id)"),)
            if classify(self.segments(node.value, scope)) == SEG_DYNAMIC:
                return ((SEG_DYNAMIC, node, f"`{short(node)}`"),)
            return _U
        if t is ast.Call:
            return self._seg_call(node, scope)
        if t is ast.IfExp:
            a = self.segments(node.body, scope)
            b = self.segments(node.orelse, scope)
            ka, kb = classify(a), classify(b)
            if ka == SEG_STATIC and kb == SEG_STATIC:
                na, nb = static_chars(a), static_chars(b)
                return ((SEG_STATIC, None if na is None or nb is None else min(na, nb)),)
            if SEG_DYNAMIC in (ka, kb):
                return ((SEG_DYNAMIC, node, f"`{short(node)}`"),)
            return _U
        if t in (ast.Await, ast.FormattedValue, ast.NamedExpr):
            return self.segments(node.value, scope)
        if t in (ast.List, ast.Tuple):
            out = []
            for e in node.elts:
                out.extend(self.text_segments(e, scope))
            return out
        return _U

    def text_segments(self, node: Any, scope: Scope) -> tuple:
        """Segments of a piece of prompt text that may be a content block (``{"type":
        "text", "text": ...}``) or a list of blocks."""
        t = type(node)
        if t is ast.Dict:
            for k, v in zip(node.keys, node.values):
                if type(k) is ast.Constant and k.value in ("text", "content"):
                    return self.text_segments(v, scope)
            return _U
        return self.segments(node, scope)

    def _collapse(self, segs: Sequence[Any], use: ast.AST, label: str) -> tuple:
        kind = classify(segs)
        if kind == SEG_STATIC:
            total = static_chars(segs)
            if len(segs) == 1:
                return tuple(segs)
            prose = all(len(x) < 3 or x[2] for x in segs if x[0] == SEG_STATIC)
            return ((SEG_STATIC, total, prose),)
        if kind == SEG_DYNAMIC:
            for s in segs:
                if s[0] == SEG_VOLATILE:
                    return ((SEG_VOLATILE, use, f"{label}, set from {s[2]},"),)
            why = next(s[2] for s in segs if s[0] == SEG_DYNAMIC)
            return ((SEG_DYNAMIC, use, f"{label} ({why})" if why != label else label),)
        return _U

    def _seg_name(self, node: ast.Name, scope: Scope) -> Any:
        name = node.id
        bindings = self.resolve(name, scope, node.lineno)
        if tables.REQUEST_ID_RE.match(name) and not any(b.kind in (ASSIGN, AUG) for b in bindings):
            return ((SEG_VOLATILE, node, f"`{name}` (a per-request id)"),)
        if not bindings:
            return _U
        kinds = {b.kind for b in bindings}
        if PARAM in kinds:
            b = bindings[0]
            if self.param_is_dynamic(b.scope, name):
                return ((SEG_DYNAMIC, node, f"`{name}` (a parameter)"),)
            return _U
        if kinds <= {ASSIGN, AUG}:
            assigns = [b for b in bindings if b.kind == ASSIGN]
            if len(assigns) == 1:
                a = assigns[0]
                augs = sorted(
                    (b for b in bindings if b.kind == AUG and b.line >= a.line),
                    key=lambda b: (b.line, b.col),
                )
                if is_template(a.value) or augs:
                    out = list(self.segments(a.value, a.scope))
                    for b in augs:
                        out.extend(self.segments(b.value, b.scope))
                    return out
                return self._collapse(self.segments(a.value, a.scope), node, f"`{name}`")
            if assigns:
                parts = [self.segments(b.value, b.scope) for b in assigns]
                kinds2 = [classify(p) for p in parts]
                if all(k == SEG_STATIC for k in kinds2):
                    lens = [static_chars(p) for p in parts]
                    known = [n for n in lens if n is not None]
                    return ((SEG_STATIC, None if len(known) < len(lens) else min(known)),)
                if SEG_DYNAMIC in kinds2:
                    return self._collapse(parts[kinds2.index(SEG_DYNAMIC)], node, f"`{name}`")
            return _U
        if ITER in kinds or UNPACK in kinds or WITH in kinds:
            for b in bindings:
                if (
                    b.kind in (ITER, UNPACK, WITH)
                    and classify(self.segments(b.value, b.scope)) == SEG_DYNAMIC
                ):
                    return ((SEG_DYNAMIC, node, f"`{name}` (from `{short(b.value)}`)"),)
        return _U

    def _seg_attribute(self, node: ast.Attribute, scope: Scope) -> Any:
        if tables.REQUEST_ID_RE.match(node.attr):
            return ((SEG_VOLATILE, node, f"`{short(node)}` (a per-request id)"),)
        if node.attr in tables.TYPE_TEXT_ATTRS:
            return ((SEG_STATIC, 0),)  # fixed by the type or function (size unknown)
        base = node.value
        if type(base) is ast.Name and base.id == "self":
            bl = [b for b in self.self_attr(node.attr, scope) if b.kind == ASSIGN]
            if len(bl) == 1:
                return self._collapse(
                    self.segments(bl[0].value, bl[0].scope), node, f"`{short(node)}`"
                )
            return _U
        k = classify(self.segments(base, scope))
        if k == SEG_DYNAMIC:
            segs = self.segments(base, scope)
            for s in segs:
                if s[0] == SEG_VOLATILE:
                    return ((SEG_VOLATILE, node, s[2]),)
            return ((SEG_DYNAMIC, node, f"`{short(node)}`"),)
        return _U

    def _seg_call(self, node: ast.Call, scope: Scope) -> Any:
        got = self.volatile_call(node, scope)
        if got:
            if got[1] == tables.RATE_PROCESS:
                return ((SEG_STATIC, 0),)  # the same for every request of a process
            return ((SEG_VOLATILE, node, got[0]),)
        func = node.func
        args = node.args
        q = self.facts.qualname(func)
        if type(func) is ast.Attribute:
            attr = func.attr
            recv = func.value
            if attr == "format":
                template = self.literal_str(recv, scope)
                if template is not None:
                    return self._seg_format(template, node, scope)
            elif attr == "join" and len(args) == 1 and type(args[0]) in (ast.List, ast.Tuple):
                sep = self.literal_str(recv, scope)
                if sep is not None:
                    out: list[tuple[Any, ...]] = []
                    listed: Any = args[0]  # an ast.List or ast.Tuple (checked above)
                    for i, e in enumerate(listed.elts):
                        if i and sep:
                            out.append((SEG_STATIC, len(sep)))
                        out.extend(self.segments(e, scope))
                    return out
            elif attr == "replace" and len(args) >= 2:
                text = self.literal_str(recv, scope)
                old = self.literal_str(args[0], scope)
                if text is not None and old:
                    pieces = text.split(old)
                    new = self.segments(args[1], scope)
                    out = []
                    for i, p in enumerate(pieces):
                        if i:
                            out.extend(new)
                        if p:
                            out.append((SEG_STATIC, len(p)))
                    return out
            elif attr in tables.TEXT_PASSTHROUGH_METHODS:
                return self.segments(recv, scope)
            elif attr in tables.FILE_READ_METHODS and not args and self._file_handle(recv, scope):
                if classify(self.segments(recv, scope)) == SEG_DYNAMIC:
                    return ((SEG_DYNAMIC, node, f"`{short(node)}`"),)
                return ((SEG_STATIC, None, self._prose_file(recv, scope)),)
        if q in tables.TEXT_PASSTHROUGH_CALLS and len(args) == 1:
            return self.segments(args[0], scope)
        name = func.attr if type(func) is ast.Attribute else getattr(func, "id", "")
        if tables.TYPE_SCHEMA_CALL_RE.search(name):
            return ((SEG_STATIC, 0),)  # fixed by the type (size unknown: not counted)
        fs, _bound = self.callee(node, scope)
        if fs is not None and len(fs.returns) == 1:
            # A module function that assembles text: its parameters count as per-request
            # when some call passes per-request text (see param_is_dynamic).
            return self.segments(fs.returns[0], fs)
        parts = list(args) + [kw.value for kw in node.keywords]
        if type(func) is ast.Attribute:
            parts.append(func.value)
        for part in parts:
            segs = self.segments(part, scope)
            if classify(segs) == SEG_DYNAMIC:
                for s in segs:
                    if s[0] == SEG_VOLATILE:
                        return ((SEG_VOLATILE, node, s[2]),)
                return ((SEG_DYNAMIC, node, f"`{short(node)}`"),)
        if (
            q is not None
            and q.startswith("builtins.")
            and parts
            and all(classify(self.segments(p, scope)) == SEG_STATIC for p in parts)
        ):
            return ((SEG_STATIC, 0),)
        return _U

    def _seg_format(self, template: str, node: ast.Call, scope: Scope) -> Any:
        try:
            parsed = list(_FORMATTER.parse(template))
        except ValueError:
            return _U
        kws = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        args = node.args
        auto = 0
        out: list[tuple[Any, ...]] = []
        for literal, field, _spec, _conv in parsed:
            if literal:
                out.append((SEG_STATIC, len(literal)))
            if field is None:
                continue
            head = field.split(".", 1)[0].split("[", 1)[0]
            if head == "":
                value = args[auto] if auto < len(args) else None
                auto += 1
            elif head.isdigit():
                i = int(head)
                value = args[i] if i < len(args) else None
            else:
                value = kws.get(head)
            if value is None or type(value) is ast.Starred:
                out.append(_U)
            else:
                out.extend(self.segments(value, scope))
        return out

    def _seg_percent(self, node: ast.BinOp, scope: Scope) -> Any:
        template = self.literal_str(node.left, scope)
        if template is None:
            return _U
        right = node.right
        values = list(right.elts) if type(right) is ast.Tuple else [right]
        out: list[tuple[Any, ...]] = []
        pos = 0
        i = 0
        for m in _PERCENT_RE.finditer(template):
            if m.start() > pos:
                out.append((SEG_STATIC, m.start() - pos))
            pos = m.end()
            if m.group(0) == "%%":
                out.append((SEG_STATIC, 1))
                continue
            if m.group(1) and type(right) is ast.Dict:
                value = None
                for k, v in zip(right.keys, right.values):
                    if type(k) is ast.Constant and k.value == m.group(1)[1:-1]:
                        value = v
                out.extend(self.segments(value, scope) if value is not None else _U)
            elif i < len(values):
                out.extend(self.segments(values[i], scope))
                i += 1
            else:
                out.append(_U)
        if pos < len(template):
            out.append((SEG_STATIC, len(template) - pos))
        return out

    def param_is_dynamic(self, fs: Scope, name: str) -> bool:
        """A parameter counts as per-request unless every call in this module passes static
        text for it (or leaves the default). ``self``/``cls`` never count."""
        if fs.kind != "function" or (
            fs.cls is not None and fs.params and fs.params[0] == name and name in ("self", "cls")
        ):
            return False
        if tables.PREFIX_NAME_RE.search(name) or tables.STRONG_PREFIX_NAME_RE.search(name):
            return False  # prompt text handed down (``system``, ``system_prompt``): not per-request
        key = (id(fs), name)
        got = self._param_static.get(key)
        if got is not None:
            return not got
        self._param_static[key] = True  # cycle guard
        sites = list(self.facts.calls.get(fs.name, ()))
        if fs.cls is not None:
            sites += self.facts.calls.get("self." + fs.name, [])
        static = bool(sites)
        for call, cscope in sites:
            target, bound = self.callee(call, cscope)
            if target is not fs:
                continue
            arg = self.arg_for(call, fs, name, bound)
            if arg is not None and classify(self.segments(arg, cscope)) != SEG_STATIC:
                static = False
                break
        self._param_static[key] = static
        return not static
