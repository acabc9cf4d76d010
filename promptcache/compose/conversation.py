"""``promptcache.Conversation``: a long conversation kept cache-friendly.

The history is append-only: each turn is normalized once, when it is appended, and the past
is never rewritten, so every request's prefix extends the previous one and the provider's
cache keeps hitting. Past a token or turn threshold, a user-supplied summarizer condenses the
history and the conversation restarts as the frozen layers + a summary (the "commit and
clear" strategy): the frozen layers (system, tools, documents) stay byte-identical -- the
same ``prefix_hash``, the same rendered bytes -- so their cache entry survives the restart;
the summary lives in the semi-stable session layer, after them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from promptcache.compose.build import Prompt, assemble, normalize_messages, session_layer
from promptcache.prompt.breakpoints import block_tokens
from promptcache.prompt.layers import Message

__all__ = ["Conversation", "Summarizer", "SUMMARY_HEADER"]

Summarizer = Callable[[list, str | None], str]
SUMMARY_HEADER = "Summary of the conversation so far:"


def _is_turn(msg: Message) -> bool:
    """A user message that is not only tool results starts a turn."""
    return msg["role"] == "user" and any(b["type"] != "tool_result" for b in msg["content"])


class Conversation:
    """An append-only conversation over fixed frozen layers.

    Args:
        system, tools, documents, session: the layers, as for :func:`promptcache.build`.
        summarizer: ``summarizer(messages, previous_summary) -> str``: condenses ``messages``
            (the turns being retired, as they were appended) and the previous summary
            (``None`` the first time) into one text. Required for compaction.
        max_history_tokens: compact when the history is estimated above this many tokens.
        max_turns: compact when the history holds more than this many user turns.
        keep_last_turns: turns kept verbatim after a compaction (default 0: clear all).
        model: model whose tokenizer estimates history tokens (``None``: an estimate).
        strict, sort_tools: as for :func:`promptcache.build`.

    Raises:
        ValueError: a threshold without a summarizer, or a non-positive threshold.
    """

    def __init__(
        self,
        *,
        system: Any = None,
        tools: Any = None,
        documents: Any = None,
        session: Any = None,
        summarizer: Summarizer | None = None,
        max_history_tokens: int | None = None,
        max_turns: int | None = None,
        keep_last_turns: int = 0,
        model: str | None = None,
        strict: bool = False,
        sort_tools: bool = False,
    ) -> None:
        if (max_history_tokens is not None or max_turns is not None) and summarizer is None:
            raise ValueError("a max_history_tokens / max_turns threshold needs a summarizer")
        for name, v in (("max_history_tokens", max_history_tokens), ("max_turns", max_turns)):
            if v is not None and v < 1:
                raise ValueError(f"{name} must be at least 1, got {v!r}")
        if keep_last_turns < 0:
            raise ValueError(f"keep_last_turns must be >= 0, got {keep_last_turns!r}")
        self._frozen_args = dict(
            system=system, tools=tools, documents=documents, strict=strict, sort_tools=sort_tools
        )
        self._session_texts = list(session_layer(session).texts)
        self.summarizer = summarizer
        self.max_history_tokens = max_history_tokens
        self.max_turns = max_turns
        self.keep_last_turns = keep_last_turns
        self.model = model
        self.summary: str | None = None
        self.compactions = 0
        self._raw: list[Any] = []
        self._raw_end: list[int] = []  # len(self._neutral) after each raw message
        self._neutral: list[Message] = []
        self._tokens: list[int] = []
        self._session_arg: Any = self._session_texts or None

    # ---- history ----------------------------------------------------------------------

    def append(self, *messages: Any) -> Conversation:
        """Append messages (OpenAI chat, OpenAI Responses or Anthropic form) to the history.
        Each is normalized once; earlier ones are not touched. Returns ``self``."""
        for msg in messages:
            neutral = normalize_messages([msg])
            if (
                len(neutral) == 1
                and self._neutral
                and neutral[0]["role"] == "user"
                and all(b["type"] == "tool_result" for b in neutral[0]["content"])
                and self._neutral[-1]["role"] == "user"
                and all(b["type"] == "tool_result" for b in self._neutral[-1]["content"])
            ):
                # consecutive tool results belong to one turn (as build() merges them)
                self._neutral[-1] = {
                    **self._neutral[-1],
                    "content": self._neutral[-1]["content"] + neutral[0]["content"],
                }
                self._tokens[-1] += sum(block_tokens(b, self.model) for b in neutral[0]["content"])
            else:
                for n in neutral:
                    self._neutral.append(n)
                    self._tokens.append(sum(block_tokens(b, self.model) for b in n["content"]))
            self._raw.append(msg)
            self._raw_end.append(len(self._neutral))
        return self

    @property
    def messages(self) -> tuple[Message, ...]:
        """The current history in the neutral form (after any compaction)."""
        return tuple(self._neutral)

    @property
    def raw_messages(self) -> list[Any]:
        """The current history as it was appended."""
        return list(self._raw)

    @property
    def history_tokens(self) -> int:
        """Estimated tokens of the current history."""
        return sum(self._tokens)

    @property
    def turns(self) -> int:
        """User turns in the current history (tool results do not start a turn)."""
        return sum(1 for m in self._neutral if _is_turn(m))

    def needs_compaction(self) -> bool:
        """Whether a threshold is exceeded."""
        return (
            self.max_history_tokens is not None and self.history_tokens > self.max_history_tokens
        ) or (self.max_turns is not None and self.turns > self.max_turns)

    # ---- commit and clear -------------------------------------------------------------

    def compact(self) -> bool:
        """Summarize the history and restart as frozen layers + session + summary, keeping the
        last ``keep_last_turns`` turns verbatim. Returns False when there is nothing to retire.

        Raises:
            ValueError: no summarizer, or the summarizer returned something other than a
                non-empty string. Whatever the summarizer raises propagates and the history is
                left unchanged.
        """
        if self.summarizer is None:
            raise ValueError("compact() needs a summarizer")
        cut = self._cut_index()
        if cut == 0:
            return False
        # map neutral index -> raw index: raw messages that produced neutral[:cut]
        retired_raw, kept_raw = self._split_raw(cut)
        summary = self.summarizer(list(retired_raw), self.summary)
        if not isinstance(summary, str) or not summary.strip():
            raise ValueError("the summarizer must return a non-empty string")
        self.summary = summary.strip()
        self._neutral = self._neutral[cut:]
        self._tokens = self._tokens[cut:]
        self._raw_end = [e - cut for e in self._raw_end[len(retired_raw) :]]
        self._raw = list(kept_raw)
        self._session_arg = self._session_texts + [f"{SUMMARY_HEADER}\n{self.summary}"]
        self.compactions += 1
        return True

    def _cut_index(self) -> int:
        """Neutral index where the kept turns start (``len`` when none are kept)."""
        if self.keep_last_turns == 0:
            return len(self._neutral)
        starts = [i for i, m in enumerate(self._neutral) if _is_turn(m)]
        if len(starts) <= self.keep_last_turns:
            return 0
        return starts[-self.keep_last_turns]

    def _split_raw(self, cut: int) -> tuple[list[Any], list[Any]]:
        r = 0
        while r < len(self._raw) and self._raw_end[r] <= cut:
            r += 1
        return self._raw[:r], self._raw[r:]

    # ---- requests ---------------------------------------------------------------------

    def prompt(self, dynamic: Any = None) -> Prompt:
        """The :class:`promptcache.Prompt` for the next request: frozen layers, session (+
        summary), the history, then ``dynamic``. Compacts first when a threshold is
        exceeded."""
        if self.needs_compaction():
            self.compact()
        return assemble(
            system=self._frozen_args["system"],
            tools=self._frozen_args["tools"],
            documents=self._frozen_args["documents"],
            session=self._session_arg,
            history=tuple(self._neutral),
            dynamic=dynamic,
            strict=self._frozen_args["strict"],
            sort_tools=self._frozen_args["sort_tools"],
        )

    def __len__(self) -> int:
        return len(self._neutral)

    def __repr__(self) -> str:
        return (
            f"Conversation(messages={len(self._neutral)}, turns={self.turns}, "
            f"history_tokens~{self.history_tokens}, compactions={self.compactions})"
        )
