"""Which hazards reach a cached prefix, and through what.

Every sink the walk recorded is evaluated once: whole values for system prompts and tool
lists, every message but the last for message lists, and messages with a system or developer
role wherever they are built (unless they are the last message of a list). Hazards that are
a function's own parameter are carried back to that function's callers in the module, so a
volatile argument is reported where the caller passes it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any, NamedTuple

from linters.flow.facts import ASSIGN, IMPORT, MESSAGES, PARAM, PROMPT, ROLE, WITH, Scope, Sink
from linters.flow.hazards import partial, rerate, unordered
from linters.flow.resolve import is_static, is_template
from linters.flow.values import HAZARD_PARAM, Evaluator, Hazard


class Reach(NamedTuple):
    """A hazard that reaches ``sink``; ``via`` names the call it travelled through."""

    hazard: Hazard
    sink: Sink
    via: str | None


def prefix_reaches(ev: Evaluator, seeds: list[Any] | None = None) -> list[Reach]:
    """All hazards reaching a cached prefix in the module, de-duplicated by (kind, node).
    With ``seeds`` (``(expr, scope, sink, hop)``: message lists this module passes to a
    function of another module that sends them, see :func:`incoming`), those lists only."""
    facts = ev.facts
    out: list[Reach] = []
    last_ids: set[int] = set()
    # (function, parameter, sink, hop, a message list, the parameter hazard: its rate cap)
    pending: list[tuple[Scope, str, Sink, str | None, bool, Hazard]] = []
    seen_params: set[tuple[int, str, bool, str, bool, bool]] = set()

    if seeds is None:
        ev.param_sinks = {}
        ev.param_msg_sinks = {}
        ev.param_sink_names = set()
    param_sinks = ev.param_sinks if ev.param_sinks is not None else {}
    param_msg_sinks = ev.param_msg_sinks

    def take(hs: Iterable[Hazard], sink: Sink, via: str | None, messages: bool = False) -> None:
        """Record ``hs`` reaching ``sink``: a parameter hazard goes to this module's
        ``param_sinks`` (``param_msg_sinks`` when ``messages``) and is queued once to be
        followed to its callers; any other is appended to the result. Returns None."""
        for h in hs:
            if h.kind == HAZARD_PARAM:
                fs, pname = h.detail
                if not messages:
                    param_sinks.setdefault((id(fs), pname), []).append((sink, via, h))
                    ev.param_sink_names.add(fs.name)
                else:
                    param_msg_sinks.setdefault((id(fs), pname), []).append((sink, via))
                key = (id(fs), pname, messages, h.rate, h.partial, h.unordered)
                if key not in seen_params:
                    seen_params.add(key)
                    pending.append((fs, pname, sink, via, messages, h))
            elif not (h.past_mark and single_turn(ev, sink)):
                out.append(Reach(capped(h, sink), sink, via))

    def messages_sink(expr: Any, scope: Scope, sink: Sink, via: str | None) -> None:
        """Take (:func:`take`) the hazards of the message list ``expr`` sent at ``sink``:
        a parameter holding the list, else the content of every item before the last one
        (every item when the list repeats; the last one is marked in ``last_ids``).
        Returns None."""
        if type(expr) is ast.Name:
            bl = ev.resolve(expr.id, scope, expr.lineno)
            param = next((b for b in bl if b.kind == PARAM), None)
            if param is not None:  # the caller's list (also when reassigned from it)
                take((Hazard(HAZARD_PARAM, expr, (param.scope, expr.id)),), sink, via, True)
            if bl and all(b.kind == PARAM for b in bl):
                return
        items = message_items(ev, expr, scope)
        if not items:
            return
        last, lscope, repeats = items[-1]
        prefix = items if repeats else items[:-1]
        if not repeats:
            mark_last(ev, last, lscope, last_ids)
        for e, s, _ in prefix:
            take(ev.hazards(_content(e), s), sink, via)

    sinks = sorted(facts.sinks, key=lambda s: (s.kind == ROLE, s.kind != MESSAGES))
    if seeds is not None:
        sinks = []
        for expr, scope, sink, hop in seeds:
            messages_sink(expr, scope, sink, hop)
    for sink in sinks:
        if sink.kind == MESSAGES:
            messages_sink(sink.expr, sink.scope, sink, None)
        elif sink.kind == ROLE:
            if id(sink.node if sink.node is not None else sink.expr) not in last_ids:
                take(ev.hazards(sink.expr, sink.scope), sink, None)
        elif sink.kind == PROMPT:
            continue  # position matters: judged on segments (volatile.py, layout.py)
        else:
            take(ev.hazards(sink.expr, sink.scope), sink, None)

    # Carry parameters back to the callers, transitively.
    while pending:
        fs, pname, sink, via, messages, ph = pending.pop()
        sites = list(facts.calls.get(fs.name, ()))
        if fs.cls is not None:
            sites += facts.calls.get("self." + fs.name, [])
        for call, cscope in sites:
            target, bound = ev.callee(call, cscope)
            if target is not fs:
                continue
            arg = ev.arg_for(call, fs, pname, bound)
            if arg is None:
                continue
            hop = f"passed to `{fs.name}()` as `{pname}`"
            if messages:
                messages_sink(arg, cscope, sink, hop)
            else:
                take(as_argument(ev.hazards(arg, cscope), ph), sink, hop)

    unique: dict[tuple[str, int, int], Reach] = {}
    for r in out:  # one per use and root cause (a clock and a stored note may share a use)
        h = r.hazard
        unique.setdefault((h.kind, id(h.node), id(h.origin) if h.origin is not None else 0), r)
    return list(unique.values())


def as_argument(hs: Iterable[Hazard], param: Hazard) -> tuple[Hazard, ...]:
    """The hazards of an argument as the parameter ``param`` uses them: slowed to the
    parameter's rate (``d.strftime("%Y-%m-%d")`` of a clock is per day), on one code path
    only when the parameter's use is, without order hazards when it reaches the prefix only
    through a set or ``sorted(...)``."""
    out = rerate(hs, param.rate)
    out = partial(out) if param.partial else out
    # a parameter that reaches the prefix only through set(...)/sorted(...)
    return tuple(unordered(out)) if param.unordered else out


def capped(h: Hazard, sink: Sink) -> Hazard:
    """``h`` slowed to the sink's ``rate_cap`` (a prompt evaluated once per conversation)."""
    if sink.rate_cap is None:
        return h
    return rerate((h,), sink.rate_cap)[0]


def single_turn(ev: Evaluator, sink: Sink) -> bool:
    """Whether ``sink`` is a field of a request (call keywords or a body dict) of this
    module whose ``messages`` is a list literal of one message (no earlier turn): text past
    the breakpoint of a split system prompt is then followed by nothing cached. A message
    history, or a request the linter does not see whole, may carry cached turns after it:
    False."""
    fields = ev.request_fields
    if fields is None:
        fields = ev.request_fields = {}
        for n in ast.walk(ev.facts.module.node):
            if type(n) is ast.Call:
                pairs = {kw.arg: kw.value for kw in n.keywords if kw.arg is not None}
            elif type(n) is ast.Dict:
                pairs = {
                    k.value: v
                    for k, v in zip(n.keys, n.values)
                    if type(k) is ast.Constant and type(k.value) is str
                }
            else:
                continue
            if "messages" in pairs:
                for v in pairs.values():
                    fields[id(v)] = pairs["messages"]
    msgs = fields.get(id(sink.expr))
    return type(msgs) is ast.List and len(msgs.elts) == 1 and type(msgs.elts[0]) is not ast.Starred


def last_cached(ev: Evaluator, sink: Sink) -> bool:
    """Whether nothing cached follows ``sink``'s text in its request: :func:`single_turn`,
    or a system message written as the next-to-last item of a list literal of this module
    (``[SystemMessage(content=...), UserMessage(content=...)]``: only the new message after
    it). False when a history may follow it (appended in a loop, a list the linter does not
    see whole)."""
    if sink.kind == MESSAGES:
        return False
    if single_turn(ev, sink):
        return True
    ids = ev.before_last
    if ids is None:
        ids = ev.before_last = set()
        for n in ast.walk(ev.facts.module.node):
            if type(n) is ast.List and len(n.elts) >= 2:
                if not any(type(e) is ast.Starred for e in n.elts):
                    ids.add(id(n.elts[-2]))
    message = sink.node if sink.node is not None else sink.expr
    return id(message) in ids


def reaches_of(ev: Evaluator) -> list[Reach]:
    """:func:`prefix_reaches` of a module plus :func:`incoming`, computed once per
    evaluator (another module's analysis may ask for it first)."""
    got = getattr(ev, "reaches_cache", None)
    if got is None:
        ev.reaches_cache = []  # cycle guard: modules calling each other
        got = prefix_reaches(ev)
        seeds: list[Any] = []
        got += incoming(ev, seeds)
        if seeds:
            got += prefix_reaches(ev, seeds)
        ev.reaches_cache = got
    return got


def incoming(ev: Evaluator, seeds: list[Any] | None = None) -> list[Reach]:
    """Hazards this module passes as arguments to functions of other modules of the
    project whose parameter reaches a cached prefix there (the system prompt built in
    ``b.py`` from a parameter, called from ``a.py`` with a clock). Message lists passed to
    a function of another module that sends them in a request are added to ``seeds``
    (``(argument, scope, sink, hop)``, for :func:`prefix_reaches`), also through a method
    call whose receiver cannot be told when exactly one class of the project defines a
    method of that name and it sends that parameter (:func:`_sender`)."""
    if ev.project is None:
        return []
    out: list[Reach] = []
    for sites in ev.facts.calls.values():
        for call, scope in sites:
            fs, bound, owner = ev.callee_any(call, scope)
            if fs is None:
                fs, bound, owner = _sender(ev, call, scope)
                if fs is None:
                    continue
                if getattr(owner, "param_sinks", None) is None:
                    reaches_of(owner)
                _message_seeds(ev, call, scope, fs, bound, owner, seeds)
                continue
            if owner is None or owner is ev:
                continue
            if getattr(owner, "param_sinks", None) is None:
                reaches_of(owner)
            _message_seeds(ev, call, scope, fs, bound, owner, seeds)
            for pname in fs.params:
                for sink, via, ph in owner.param_sinks.get((id(fs), pname), ()):
                    arg = ev.arg_for(call, fs, pname, bound)
                    if arg is None or not _text_built_here(ev, arg, scope):
                        continue
                    hop = f"passed to `{fs.name}()` as `{pname}` ({owner.path})"
                    if via:
                        hop += f", {via}"
                    for h in as_argument(ev.hazards(arg, scope), ph):
                        if h.kind != HAZARD_PARAM:
                            out.append(Reach(capped(h, sink), sink, hop))
    return out


def _message_seeds(
    ev: Evaluator,
    call: ast.Call,
    scope: Scope,
    fs: Scope,
    bound: bool,
    owner: Any,
    seeds: list[Any] | None,
) -> None:
    """Add to ``seeds`` the arguments of ``call`` for parameters of ``fs`` (a function of
    the module ``owner``) that ``owner`` sends as a request's message list."""
    if seeds is None or owner is ev:
        return
    for pname in fs.params:
        for sink, via in owner.param_msg_sinks.get((id(fs), pname), ()):
            arg = ev.arg_for(call, fs, pname, bound)
            if arg is None:
                continue
            hop = f"passed to `{fs.name}()` as `{pname}` ({owner.path})"
            seeds.append((arg, scope, sink, f"{hop}, {via}" if via else hop))


def _sender(ev: Evaluator, call: ast.Call, scope: Scope) -> tuple[Any, bool, Any]:
    """For ``x.m(...)`` whose receiver the linter cannot tell (a parameter, an attribute
    set from one): the one method named ``m`` that a class of the project defines, when its
    module sends one of its parameters as a request's message list; ``(None, False, None)``
    otherwise, and for a receiver that is an imported name or an object made by a call
    outside the project (``ws = websocket.connect(...)``)."""
    none = (None, False, None)
    func = call.func
    project = ev.project
    if type(func) is not ast.Attribute or project is None or not call.args:
        return none
    root = func.value
    while type(root) is ast.Attribute:
        root = root.value
    if type(root) is not ast.Name or root.id in ev.facts.imports:
        return none
    found = project.methods(func.attr)  # a dict look-up: most calls stop here
    if len(found) != 1:
        return none
    for b in ev.resolve(root.id, scope, call.lineno):
        if b.kind == IMPORT or (
            b.kind in (ASSIGN, WITH) and type(b.value) is ast.Call and _outside(ev, b.value)
        ):
            return none
    owner, fs = found[0]
    if owner is ev or is_static(fs):
        return none
    return fs, True, owner


def _outside(ev: Evaluator, call: ast.Call) -> bool:
    """A call of a dotted name that is imported from outside the project."""
    q = ev.facts.qualname(call.func) or ""
    head = q.partition(".")[0]
    return head in ev.facts.imports and ev.project_lookup(q) is None


def _text_built_here(ev: Evaluator, arg: Any, scope: Scope) -> bool:
    """Whether an argument is text this module builds (an f-string, ``+``, ``.format``, or
    a name bound once to one): only such text is followed into another module's prompt.
    An object (``agent_state``) or a bare value (``get_utc_time()``) handed to a builder
    says nothing about how the builder renders it, or how often it runs."""
    if type(arg) is ast.Name:
        bl = ev.resolve(arg.id, scope, arg.lineno)
        if len(bl) != 1 or bl[0].kind != ASSIGN:
            return False
        arg = bl[0].value
    return type(arg) is not ast.Constant and is_template(arg)


def _content(message: Any) -> Any:
    """What of a message dict reaches the model: its ``content`` (not ids or metadata)."""
    if type(message) is ast.Dict:
        keys = [k.value if type(k) is ast.Constant else None for k in message.keys]
        if "role" in keys and None not in keys:
            for k, v in zip(keys, message.values):
                if k in ("content", "text", "parts"):
                    return v
            return None
    return message


def message_items(ev: Evaluator, expr: Any, scope: Scope) -> Any:
    """Message-list items, following calls to module functions that return the list
    (:meth:`linters.flow.values.Evaluator.message_items`)."""
    return ev.message_items(expr, scope)


def mark_last(ev: Evaluator, node: Any, scope: Scope, last_ids: set[int]) -> None:
    """Remember the last message (and the dict a name for it holds) so that a
    system-role message placed last is not treated as a prefix."""
    last_ids.add(id(node))
    if type(node) is ast.Name:
        for b in ev.resolve(node.id, scope, node.lineno):
            if b.kind == ASSIGN:
                last_ids.add(id(b.value))
