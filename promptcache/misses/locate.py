"""Where a request stops sharing its prefix with an earlier one, from their digest chains.

:func:`first_difference` compares two :class:`~promptcache.misses.digest_chain.DigestChain` s
segment by segment, then atom by atom inside the first differing segment, and returns the
JSON path of the first difference, the number of characters of the chain that still
matched, and whether that offset is exact:

- a changed value: the path of that value (``$.system[0].text``), offset inside it from the
  block digests (to within :data:`~promptcache.misses.digest_chain.BLOCK_CHARS` characters);
- a structural change (a key or list item added, removed or reordered): the deepest object
  or list that holds the change (``$.tools[2].input_schema.properties``), or the list item
  that was added or removed (``$.tools[3]``);
- with both chains' values in memory (same process), the offset is the exact character
  where their serializations first differ, and :func:`excerpts` gives before/after text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from promptcache.misses.digest_chain import (
    BLOCK_CHARS,
    Atom,
    DigestChain,
    format_path,
    parse_path,
    serialize,
)

__all__ = ["FirstDifference", "first_difference", "common_prefix_len", "excerpts"]


@dataclass(frozen=True)
class FirstDifference:
    """The first place where the current request differs from the earlier one.

    Attributes:
        path: JSON path in the current request (in the earlier one for a removal).
        offset_chars: characters of the chain before the difference: the matched prefix.
        exact: True when ``offset_chars`` is the exact character; False when it is the start
            of the differing value or block (the difference lies within
            :data:`~promptcache.misses.digest_chain.BLOCK_CHARS` characters after it for long
            strings).
        segment: index of the first differing segment (of the current chain).
        kind: ``"changed"`` (a value), ``"structure"`` (keys or items added, removed or
            reordered), ``"inserted"``/``"removed"`` (a whole segment), ``"truncated"`` (the
            current request is a strict prefix of the earlier one).
    """

    path: str
    offset_chars: int
    exact: bool
    segment: int
    kind: str


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings (binary search over slice
    comparisons, O(log n) C-level comparisons)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _common(a: Sequence[str | int], b: Sequence[str | int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y or type(x) is not type(y):
            break
        n += 1
    return n


def _structural_path(
    root: list[str | int],
    last: list[str | int] | None,
    cur: list[str | int] | None,
    prev: list[str | int] | None,
) -> str:
    """The deepest node holding a structural change. ``last``: the last matching path;
    ``cur``/``prev``: the first differing paths (None when that side has ended)."""
    cands: list[tuple[int, list[str | int]]] = []
    if cur is not None and prev is not None:
        cands.append((_common(cur, prev), cur))
    if last is not None:
        if cur is not None:
            cands.append((_common(last, cur), cur))
        if prev is not None:
            cands.append((_common(last, prev), prev))
    depth, source = max(cands, key=lambda c: c[0]) if cands else (0, cur or prev or [])
    if depth < len(root):
        depth, source = len(root), root
    base = list(source[:depth])
    # a list item added or removed: name the item (the side that continues under base)
    for side in (cur, prev):
        if side is not None and side[:depth] == base and len(side) > depth:
            if isinstance(side[depth], int):
                base.append(side[depth])
            break
    return format_path(base)


def _opening(atom: Atom, depth: int) -> int:
    """Offset where the member holding ``atom`` starts under the node ``depth``
    components below the segment root: the atom's start less the keys and brackets
    opened after that node (``"c":{"type":`` before ``"string"``)."""
    comps = parse_path("$" + atom.path)[depth:]
    keys = sum(len(serialize(c)) + 1 for c in comps if isinstance(c, str))
    return max(0, atom.start - keys - max(0, len(comps) - 1))


def _block_offset(a: Atom, b: Atom) -> int:
    """Offset of the first differing block of two long-string atoms (0 when unknown)."""
    for k, (x, y) in enumerate(zip(a.blocks, b.blocks)):
        if x != y:
            return k * BLOCK_CHARS
    if a.blocks and b.blocks:
        return min(len(a.blocks), len(b.blocks)) * BLOCK_CHARS
    return 0


def first_difference(prev: DigestChain, cur: DigestChain) -> FirstDifference | None:
    """The first difference of ``cur`` from ``prev`` (both in cache order).

    Returns None when ``cur`` starts with the whole of ``prev`` (the same request, or the
    same with more appended: a clean continuation).
    """
    ps, cs = prev.segments, cur.segments
    n = min(len(ps), len(cs))
    pk, ck = prev.keys, cur.keys
    if pk[:n] == ck[:n]:  # C-level comparison of the (path, digest) runs
        i = n
    else:
        lo, hi = 0, n  # pk[:lo] == ck[:lo], pk[:hi] != ck[:hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pk[lo:mid] == ck[lo:mid]:
                lo = mid
            else:
                hi = mid
        i = lo
    if i == len(ps):
        return None
    if i == len(cs):
        return FirstDifference(ps[i].path, cur.chars, True, i, "truncated")
    a, b = ps[i], cs[i]
    start = b.start
    last = parse_path(cs[i - 1].path) if i else None
    exact_off: int | None = None
    if len(prev.values) > i and len(cur.values) > i:
        exact_off = common_prefix_len(serialize(prev.values[i]), serialize(cur.values[i]))
    if a.path != b.path:
        off, exact = start + (exact_off or 0), exact_off is not None
        if b.path not in {s.path for s in ps}:
            return FirstDifference(b.path, off, exact, i, "inserted")
        if a.path not in {s.path for s in cs}:
            return FirstDifference(a.path, off, exact, i, "removed")
        path = _structural_path([], last, parse_path(b.path), parse_path(a.path))
        return FirstDifference(path, off, exact, i, "structure")
    root = parse_path(b.path)
    pa, ca = prev.atoms.get(a.digest), cur.atoms.get(b.digest)
    if pa is None or ca is None:
        off = start + (exact_off or 0)
        return FirstDifference(b.path, off, exact_off is not None, i, "changed")
    m = min(len(pa), len(ca))
    j = 0
    while j < m and pa[j].path == ca[j].path and pa[j].digest == ca[j].digest:
        j += 1

    def rel(atom: Atom | None) -> list[str | int] | None:
        return None if atom is None else root + parse_path("$" + atom.path)

    cur_atom = ca[j] if j < len(ca) else None
    prev_atom = pa[j] if j < len(pa) else None
    if cur_atom is not None and prev_atom is not None and cur_atom.path == prev_atom.path:
        path = format_path(rel(cur_atom) or root)
        off = cur_atom.start + _block_offset(prev_atom, cur_atom)
        kind = "changed"
    else:
        last_atom = ca[j - 1] if j else None
        path = _structural_path(root, rel(last_atom), rel(cur_atom), rel(prev_atom))
        at = cur_atom if cur_atom is not None else prev_atom
        off = b.chars if at is None else _opening(at, len(parse_path(path)) - len(root))
        kind = "structure"
    if exact_off is not None:
        return FirstDifference(path, start + exact_off, True, i, kind)
    return FirstDifference(path, start + off, False, i, kind)


def excerpts(
    prev: DigestChain, cur: DigestChain, diff: FirstDifference, width: int = 40
) -> tuple[str, str] | None:
    """Short before/after text around ``diff`` (``width`` characters after it, a quarter of
    that before), from the chains' in-memory values; None when either chain has none."""
    i = diff.segment
    if len(prev.values) <= i or len(cur.values) <= i or diff.kind == "truncated":
        return None
    a, b = serialize(prev.values[i]), serialize(cur.values[i])
    off = diff.offset_chars - cur.segments[i].start
    lo = max(0, off - width // 4)
    return a[lo : off + width], b[lo : off + width]
