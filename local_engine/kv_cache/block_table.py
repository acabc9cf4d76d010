"""Block tables as rows of one persistent int32 matrix, so that a step gathers its batch's
tables with one NumPy index instead of rebuilding per-sequence lists.

The :class:`~local_engine.kv_cache.manager.KVCacheManager` writes a sequence's row as its
blocks change (new blocks appended, a copy-on-write replacing one entry, a fork copying a row)
and releases the row when the sequence gives its blocks back. Row 0 is all zeros and never
given out: a sequence holding no blocks reads it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class BlockTableRows:
    """Physical block ids of each sequence, one row per sequence, unused entries 0.

    Args:
        rows, cols: initial capacity (both grow by doubling as needed).

    Attributes:
        table: int32 ``[capacity_rows, capacity_cols]``; row ``row_of[seq_id]`` holds the
            sequence's block ids in logical order in its first ``length[seq_id]`` entries.
    """

    def __init__(self, rows: int = 64, cols: int = 64):
        self.table = np.zeros((max(rows, 2), max(cols, 1)), dtype=np.int32)
        self.row_of: dict[str, int] = {}
        self.length: dict[str, int] = {}
        self._free_rows: list[int] = list(range(self.table.shape[0] - 1, 0, -1))

    def _grow(self, rows: int, cols: int) -> None:
        r, c = self.table.shape
        nr, nc = r, c
        while nr < rows:
            nr *= 2
        while nc < cols:
            nc *= 2
        if (nr, nc) == (r, c):
            return
        table = np.zeros((nr, nc), dtype=np.int32)
        table[:r, :c] = self.table
        self.table = table
        self._free_rows.extend(range(nr - 1, r - 1, -1))

    def _row(self, seq_id: str) -> int:
        row = self.row_of.get(seq_id)
        if row is None:
            if not self._free_rows:
                self._grow(self.table.shape[0] * 2, 0)
            row = self.row_of[seq_id] = self._free_rows.pop()
            self.length[seq_id] = 0
        return row

    def append(self, seq_id: str, block_ids: Iterable[int]) -> None:
        """Append block ids to the sequence's row (creating the row)."""
        ids = list(block_ids)
        row = self._row(seq_id)
        n = self.length[seq_id]
        if n + len(ids) > self.table.shape[1]:
            self._grow(0, n + len(ids))
        self.table[row, n : n + len(ids)] = ids
        self.length[seq_id] = n + len(ids)

    def set(self, seq_id: str, index: int, block_id: int) -> None:
        """Replace entry ``index`` (a copy-on-write)."""
        self.table[self.row_of[seq_id], index] = block_id

    def assign(self, seq_id: str, block_ids: Iterable[int]) -> None:
        """Replace the sequence's whole row."""
        self.release(seq_id)
        self.append(seq_id, block_ids)

    def release(self, seq_id: str) -> None:
        """Forget the sequence's row (zeroed and given back); unknown ids are a no-op."""
        row = self.row_of.pop(seq_id, None)
        if row is None:
            return
        self.table[row, : self.length.pop(seq_id)] = 0
        self._free_rows.append(row)

    def ids(self, seq_id: str) -> list[int]:
        """The sequence's block ids as Python ints (``[]`` when it holds none)."""
        row = self.row_of.get(seq_id)
        return [] if row is None else self.table[row, : self.length[seq_id]].tolist()

    def gather(self, seq_ids: Iterable[str]) -> np.ndarray:
        """int32 ``[len(seq_ids), max_len]`` (a new array): each sequence's block ids, padded
        with 0; ``max_len`` is the longest table (at least 1)."""
        row_of, length = self.row_of, self.length
        rows, width = [], 1
        for sid in seq_ids:
            row = row_of.get(sid)
            if row is None:
                rows.append(0)
            else:
                rows.append(row)
                n = length[sid]
                if n > width:
                    width = n
        return self.table[rows, :width]


__all__ = ["BlockTableRows"]
