"""Prices and cost: exact decimal arithmetic on a normalized :class:`~promptcache.Usage`.

Prices are USD per million tokens (the unit every provider's pricing page uses). The
bundled table ``promptcache/data/prices.toml`` gives, per model, the base input and output
prices, the cache-read price, the cache-write prices per TTL and (Gemini) the cache storage
price per million tokens per hour, each row with its ``source`` page and the ``date`` it
was read. Users override or add models with :func:`register_price`, a TOML file of the same
shape (:func:`load_prices`, or the ``PROMPTCACHE_PRICES`` environment variable), or by
passing ``price=Price(...)`` to :func:`cost`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from promptcache.errors import PricingError, UsageError
from promptcache.memo import IdentityMemo
from promptcache.providers.usage_record import Usage

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
import difflib

__all__ = [
    "Price",
    "Cost",
    "cost",
    "price_for",
    "register_price",
    "load_prices",
    "known_models",
    "unpriced_models",
    "read_prices",
    "PriceTable",
    "UnknownPriceWarning",
    "warn_unknown_price",
    "MILLION",
]

MILLION = Decimal(1_000_000)
_PRICE_FIELDS = (
    "input",
    "output",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "storage_per_hour",
)


def _dec(value: Any, name: str) -> Decimal | None:
    """A price as an exact Decimal (floats go through ``str`` so 0.3 stays 0.3)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise PricingError(f"price {name} must be a number, got {value!r}")
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, (int, str)):
        try:
            d = Decimal(str(value).strip())
        except Exception:
            raise PricingError(f"price {name} is not a number: {value!r}") from None
    elif isinstance(value, float):
        d = Decimal(repr(value))
    else:
        raise PricingError(f"price {name} must be a number, got {type(value).__name__}")
    if not d.is_finite() or d < 0:
        raise PricingError(f"price {name} must be a finite number >= 0, got {value!r}")
    return d


@dataclass(frozen=True)
class Price:
    """A model's prices in USD per million tokens (``Decimal``; ints, strings and floats
    are converted exactly through their decimal text).

    - ``input``, ``output``: base prices (required).
    - ``cache_read``: price of a token served from the cache; None = not known.
    - ``cache_write_5m``, ``cache_write_1h``: price of a token written to the cache with a
      5-minute / 1-hour TTL (Anthropic, Bedrock); None = not known, and a usage with such
      writes raises :class:`~promptcache.errors.PricingError` rather than falling back
      to another TTL's price.
    - ``cache_write``: write prices for other TTL labels (OpenAI ``"30m"``, ``"12h"``).
    - ``storage_per_hour``: cache storage (Gemini explicit caching), USD per million
      tokens per hour; informational here (storage is billed per cache, not per request).
    - ``long_context_threshold`` + ``long_context``: prompts above this many tokens are
      billed with these field overrides (e.g. ``{"input": "2.50", "output": "15"}``).
    - ``model``, ``provider``, ``source``, ``date``: where the figures come from.
    """

    input: Decimal
    output: Decimal
    cache_read: Decimal | None = None
    cache_write_5m: Decimal | None = None
    cache_write_1h: Decimal | None = None
    cache_write: Mapping[str, Decimal] = field(default_factory=dict)
    storage_per_hour: Decimal | None = None
    long_context_threshold: int | None = None
    long_context: Mapping[str, Decimal] = field(default_factory=dict)
    model: str | None = None
    provider: str | None = None
    source: str | None = None
    date: str | None = None

    def __post_init__(self) -> None:
        for name in _PRICE_FIELDS:
            object.__setattr__(self, name, _dec(getattr(self, name), name))
        if self.input is None or self.output is None:
            raise PricingError("Price needs both input and output prices")
        object.__setattr__(
            self,
            "cache_write",
            {str(k): _dec(v, f"cache_write[{k!r}]") for k, v in dict(self.cache_write).items()},
        )
        bad = set(self.long_context) - set(_PRICE_FIELDS) - {"cache_write"}
        if bad:
            raise PricingError(
                f"long_context may override {', '.join(_PRICE_FIELDS)}; "
                f"got {', '.join(sorted(bad))}"
            )
        if self.long_context and not self.long_context_threshold:
            raise PricingError("long_context prices need long_context_threshold (tokens)")
        object.__setattr__(self, "long_context", dict(self.long_context))

    def for_prompt(self, prompt_tokens: int) -> Price:
        """The price that applies to a request of ``prompt_tokens`` input tokens: this
        one, or, above ``long_context_threshold`` (e.g. Gemini 2.5 Pro's and Claude's
        200K-token tier), this one with the ``long_context`` overrides applied."""
        if self.long_context_threshold is None or prompt_tokens <= self.long_context_threshold:
            return self
        cached: Price | None = self.__dict__.get("_long")
        if cached is not None:
            return cached
        kw: dict[str, Any] = {k: getattr(self, k) for k in _PRICE_FIELDS}
        kw["cache_write"] = dict(self.cache_write)
        for k, v in self.long_context.items():
            if k == "cache_write":
                kw["cache_write"].update(v)
            else:
                kw[k] = v
        long = Price(
            **kw, model=self.model, provider=self.provider, source=self.source, date=self.date
        )
        object.__setattr__(self, "_long", long)  # frozen: cache the derived price once
        return long

    def write_price(self, ttl: str) -> Decimal:
        """The price of a cache write with TTL label ``ttl``; raises ``PricingError``
        when this price is not known (never substitutes another TTL's price)."""
        value = {"5m": self.cache_write_5m, "1h": self.cache_write_1h}.get(ttl)
        if value is None:
            value = self.cache_write.get(ttl)
        if value is None:
            raise PricingError(
                f"no cache write price for TTL {ttl!r} for model "
                f"{self.model or '(custom price)'}; pass "
                f"Price(cache_write_{ttl}=...)"
                if ttl in ("5m", "1h")
                else f"no cache write price for TTL {ttl!r} for model "
                f"{self.model or '(custom price)'}; pass "
                f"Price(cache_write={{{ttl!r}: ...}})"
            )
        return value

    def break_even_reads(self, ttl: str = "5m") -> int:
        """How many later cache reads repay one cache write at ``ttl``: the smallest n with
        n * (input - cache_read) >= write - input (per token). 0 when the write costs no
        more than input; raises ``PricingError`` when reads save nothing."""
        extra = self.write_price(ttl) - self.input
        if extra <= 0:
            return 0
        if self.cache_read is None:
            raise PricingError(f"no cache read price for {self.model or '(custom price)'}")
        saving = self.input - self.cache_read
        if saving <= 0:
            raise PricingError("cache reads cost no less than input: a write never pays off")
        return int(math.ceil(extra / saving))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (prices as decimal strings)."""
        d: dict[str, Any] = {
            k: (None if getattr(self, k) is None else str(getattr(self, k))) for k in _PRICE_FIELDS
        }
        d["cache_write"] = {k: str(v) for k, v in self.cache_write.items()}
        d.update(model=self.model, provider=self.provider, source=self.source, date=self.date)
        return d


@dataclass(frozen=True)
class Cost:
    """What one usage cost, in USD (exact ``Decimal``).

    - ``input``: uncached input tokens x input price; ``cache_read``: reads x read price;
      ``cache_write``: writes x their TTL's write price (``cache_write_by_ttl`` splits it);
      ``output``: output tokens x output price.
    - ``total``: their sum. ``baseline``: the same request with no cache at all (every
      prompt token at the input price, plus output). ``saving``: ``baseline - total``
      (negative when writes were not yet repaid by reads).
    - ``break_even``: for each TTL written in this usage, the reads that repay a write.
    - ``upper_bound``: True when the provider did not report caching, so every prompt
      token was priced as uncached (the true cost may be lower).
    """

    input: Decimal
    cache_read: Decimal
    cache_write: Decimal
    output: Decimal
    total: Decimal
    baseline: Decimal
    saving: Decimal
    cache_write_by_ttl: Mapping[str, Decimal] = field(default_factory=dict)
    break_even: Mapping[str, int] = field(default_factory=dict)
    upper_bound: bool = False
    model: str | None = None
    price: Price | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (amounts as decimal strings)."""
        return {
            "input": str(self.input),
            "cache_read": str(self.cache_read),
            "cache_write": str(self.cache_write),
            "output": str(self.output),
            "total": str(self.total),
            "baseline": str(self.baseline),
            "saving": str(self.saving),
            "cache_write_by_ttl": {k: str(v) for k, v in self.cache_write_by_ttl.items()},
            "break_even": dict(self.break_even),
            "upper_bound": self.upper_bound,
            "model": self.model,
        }


def cost(usage: Usage, model: str | None = None, price: Price | None = None) -> Cost:
    """Price one normalized usage.

    ``usage``: a :class:`~promptcache.Usage` (from :func:`promptcache.normalize_usage`).
    ``model``: looks up the bundled/registered price table (defaults to ``usage.model``);
    ``price``: a :class:`Price` that takes precedence over the table.

    Amounts are ``tokens * price_per_million / 1_000_000`` in exact decimal arithmetic
    (no rounding). Raises :class:`~promptcache.errors.PricingError` when no price is known
    for the model, when cache reads occur but the read price is unknown, or when writes
    occur at a TTL whose write price is unknown; ``UsageError`` when ``usage`` is not a
    ``Usage``.
    """
    if not isinstance(usage, Usage):
        raise UsageError(
            "cost() takes a promptcache.Usage; convert a provider response "
            "first with promptcache.normalize_usage(provider, response)"
        )
    model = model or usage.model
    if price is None:
        if not model:
            raise PricingError("no model and no price: pass model='...' or price=Price(...)")
        price = price_for(model)
    price = price.for_prompt(usage.prompt_tokens)
    with localcontext() as ctx:
        ctx.prec = 60  # far beyond any token count x price: results are exact
        c_input = usage.uncached_input_tokens * price.input / MILLION
        if usage.cache_read_tokens:
            if price.cache_read is None:
                raise PricingError(
                    f"the usage has {usage.cache_read_tokens} cache-read tokens but the price "
                    f"for {price.model or model or 'this request (a custom Price)'} has no "
                    f"cache_read; pass promptcache.Price(..., cache_read=...)"
                )
            c_read = usage.cache_read_tokens * price.cache_read / MILLION
        else:
            c_read = Decimal(0)
        by_ttl = {
            ttl: n * price.write_price(ttl) / MILLION for ttl, n in usage.cache_write_by_ttl.items()
        }
        c_write = sum(by_ttl.values(), Decimal(0))
        c_output = usage.output_tokens * price.output / MILLION
        total = c_input + c_read + c_write + c_output
        baseline = usage.prompt_tokens * price.input / MILLION + c_output
        saving = baseline - total
    break_even = {}
    for ttl in usage.cache_write_by_ttl:
        try:
            break_even[ttl] = price.break_even_reads(ttl)
        except PricingError:
            pass
    return Cost(
        input=c_input,
        cache_read=c_read,
        cache_write=c_write,
        output=c_output,
        total=total,
        baseline=baseline,
        saving=saving,
        cache_write_by_ttl=by_ttl,
        break_even=break_even,
        upper_bound=not usage.cache_reported,
        model=price.model or model,
        price=price,
    )


# --- fast exact path in integer pico-dollars (the ledger's per-record cost) -----------

PICO_PER_USD = 10**12
_RATES: IdentityMemo[Price, dict[str, Any] | None] = IdentityMemo(1024)


def _rates(price: Price) -> dict[str, Any] | None:
    """Per-token prices in integer pico-dollars (price per MTok x 10**6), or None when a
    price has more than 6 decimals (then the Decimal path is used); memoized per Price
    object."""
    return _RATES.get_or_make(price, lambda: _make_rates(price))


def _make_rates(price: Price) -> dict[str, Any] | None:
    def pico(v: Decimal | None) -> int | None:
        if v is None:
            return None
        x = v * 1_000_000
        if x != x.to_integral_value():
            raise ValueError
        return int(x)

    try:
        rates: dict[str, Any] | None = {
            "input": pico(price.input),
            "output": pico(price.output),
            "cache_read": pico(price.cache_read),
            "write": {
                k: pico(v)
                for k, v in {
                    **price.cache_write,
                    "5m": price.cache_write_5m,
                    "1h": price.cache_write_1h,
                }.items()
                if v is not None
            },
        }
    except ValueError:
        rates = None
    return rates


def cost_pico(
    usage: Usage, model: str | None = None, price: Price | None = None
) -> tuple[int, int, Price]:
    """``(total, baseline, price)`` of :func:`cost` in integer pico-dollars (1e-12 USD),
    computed with integers (exact for prices with at most 6 decimals, else rounded half
    even from the exact Decimal result). Same errors as :func:`cost`."""
    if price is None:
        model = model or usage.model
        if not model:
            raise PricingError("no model and no price: pass model='...' or price=Price(...)")
        price = price_for(model)
    price = price.for_prompt(usage.prompt_tokens)
    r = _rates(price)
    if r is None:
        c = cost(usage, price=price)
        return (
            int((c.total * PICO_PER_USD).to_integral_value()),
            int((c.baseline * PICO_PER_USD).to_integral_value()),
            price,
        )
    total = usage.uncached_input_tokens * r["input"] + usage.output_tokens * r["output"]
    if usage.cache_read_tokens:
        if r["cache_read"] is None:
            raise PricingError(
                f"the usage has {usage.cache_read_tokens} cache-read tokens but the price "
                f"for {price.model or model or 'this request (a custom Price)'} has no "
                f"cache_read; pass promptcache.Price(..., cache_read=...)"
            )
        total += usage.cache_read_tokens * r["cache_read"]
    for ttl, n in usage.cache_write_by_ttl.items():
        rate = r["write"].get(ttl)
        if rate is None:
            price.write_price(ttl)  # raises the same PricingError as cost()
        total += n * rate
    baseline = usage.prompt_tokens * r["input"] + usage.output_tokens * r["output"]
    return total, baseline, price


# --- the price table ------------------------------------------------------------------

_TABLE: dict[str, Price] | None = None
_ALIASES: dict[str, str] = {}
_USER: dict[str, Price] = {}
_UNPRICED: dict[str, str] = {}  # model (lower case) -> why no price is known


class UnknownPriceWarning(UserWarning):
    """Warned (once per model and process) when a request is recorded for a model with no
    known price: its cost is stored as unknown and shown as ``n/a``, never as $0."""


_WARNED: set[str] = set()
_WARN_LOCK = threading.Lock()


def warn_unknown_price(model: str | None, error: Exception) -> None:
    """Warn once per ``model`` that a recorded request has no known price (``error``: the
    :class:`~promptcache.errors.PricingError` that says why, with the closest names)."""
    key = (model or "").lower()
    with _WARN_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    import warnings

    warnings.warn(
        f"promptcache: requests for {model or '(no model)'} are recorded without a cost: "
        f"{error}. Reports show n/a; `promptcache report --prices FILE` reprices them later.",
        UnknownPriceWarning,
        stacklevel=4,  # warn_unknown_price <- Tracker._row <- Tracker.record <- the caller
    )


@dataclass(frozen=True)
class PriceTable:
    """A prices TOML file as read by :func:`read_prices`: ``prices`` by lower-case model
    name, ``aliases`` (lower-case alias -> model), ``source`` (the file)."""

    prices: Mapping[str, Price]
    aliases: Mapping[str, str]
    source: str

    def lookup(self, model: str) -> Price | None:
        """The row for ``model`` in this table alone (same matching as :func:`price_for`:
        exact name or alias, else a dated snapshot of a row), or None."""
        return _lookup(model, dict(self.prices), dict(self.aliases), {})


def read_prices(path: str | os.PathLike[str]) -> PriceTable:
    """Read a prices TOML file (the bundled table's shape, see :func:`load_prices`) without
    registering it. Raises ``PricingError`` on a malformed file, ``OSError`` if unreadable."""
    table, aliases, _ = _parse_table(Path(path).read_text("utf-8"), str(path))
    return PriceTable(table, aliases, str(path))


def _price_from_row(name: str, row: Mapping[str, Any], where: str) -> Price:
    known = set(_PRICE_FIELDS) | {
        "cache_write",
        "provider",
        "source",
        "date",
        "aliases",
        "note",
        "long_context_threshold",
        "long_context",
    }
    unknown = set(row) - known
    if unknown:
        raise PricingError(
            f"{where}: model {name!r} has unknown field(s) {', '.join(sorted(unknown))}"
        )
    kwargs: dict[str, Any] = {k: row.get(k) for k in _PRICE_FIELDS}
    if "input" not in row or "output" not in row:
        raise PricingError(f"{where}: model {name!r} needs input and output prices")
    return Price(
        **kwargs,
        cache_write=dict(row.get("cache_write", {})),
        long_context_threshold=row.get("long_context_threshold"),
        long_context=dict(row.get("long_context", {})),
        model=name,
        provider=row.get("provider"),
        source=row.get("source"),
        date=str(row["date"]) if row.get("date") is not None else None,
    )


def _parse_table(text: str, where: str) -> tuple[dict[str, Price], dict[str, str], dict[str, str]]:
    """``(prices, aliases, unpriced)`` of a prices TOML text; ``unpriced`` is the optional
    ``[unpriced]`` table (model = "why no price is known")."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PricingError(f"{where}: not valid TOML: {e}") from None
    models = data.get("models")
    if not isinstance(models, dict):
        raise PricingError(f'{where}: expected a [models."NAME"] table per model')
    table: dict[str, Price] = {}
    aliases: dict[str, str] = {}
    for name, row in models.items():
        if not isinstance(row, dict):
            raise PricingError(f"{where}: models.{name} must be a table")
        table[name.lower()] = _price_from_row(name, row, where)
        for alias in row.get("aliases", []):
            aliases[str(alias).lower()] = name.lower()
    unpriced = data.get("unpriced", {})
    if not isinstance(unpriced, dict) or not all(isinstance(v, str) for v in unpriced.values()):
        raise PricingError(f'{where}: [unpriced] maps a model to the reason, e.g. "m" = "why"')
    return table, aliases, {k.lower(): v for k, v in unpriced.items()}


def _load_bundled() -> dict[str, Price]:
    global _TABLE
    if _TABLE is None:
        text = resources.files("promptcache").joinpath("data/prices.toml").read_text("utf-8")
        table, aliases, unpriced = _parse_table(text, "promptcache/data/prices.toml")
        _ALIASES.update(aliases)
        _UNPRICED.update(unpriced)
        env = os.environ.get("PROMPTCACHE_PRICES")
        if env:
            extra, extra_aliases, _ = _parse_table(Path(env).read_text("utf-8"), env)
            table.update(extra)
            _ALIASES.update(extra_aliases)
            for name in extra:
                _UNPRICED.pop(name, None)
        _TABLE = table
    return _TABLE


def load_prices(path: str | os.PathLike[str]) -> list[str]:
    """Add or override models from a TOML file shaped like the bundled table
    (``[models."NAME"]`` with ``input``, ``output``, ``cache_read``, ``cache_write_5m``,
    ``cache_write_1h``, ``cache_write = {"30m" = ...}``, ``storage_per_hour``, ``source``,
    ``date``, ``aliases``). Returns the model names loaded. Raises ``PricingError`` on a
    malformed file, ``OSError`` when it cannot be read."""
    table, aliases, _ = _parse_table(Path(path).read_text("utf-8"), str(path))
    _price_for.cache_clear()
    _USER.update(table)
    _ALIASES.update(aliases)
    return [p.model or k for k, p in table.items()]


def register_price(model: str, price: Price) -> None:
    """Use ``price`` for ``model`` (case-insensitive) from now on, over the bundled row."""
    if not isinstance(price, Price):
        raise PricingError("register_price needs a promptcache.Price")
    if price.model is None:
        price = dataclasses.replace(price, model=model)
    _price_for.cache_clear()
    _USER[model.lower()] = price


def unpriced_models() -> dict[str, str]:
    """Models the bundled table names as having no sourced price (``[unpriced]`` in
    ``prices.toml``), with the reason; :func:`price_for` raises for them unless a price
    was registered or loaded."""
    _load_bundled()
    return {k: v for k, v in _UNPRICED.items() if k not in _USER}


def known_models() -> list[str]:
    """Every model name with a price (bundled, file-loaded and registered)."""
    return sorted({p.model or k for k, p in {**_load_bundled(), **_USER}.items()})


def _candidates(model: str) -> list[str]:
    m = model.strip().lower()
    out = [m]
    if "/" in m:  # "anthropic/claude-...", "models/gemini-..."
        out.append(m.rsplit("/", 1)[1])
    for c in list(out):  # Bedrock ids: "us.anthropic.claude-...-v1:0"
        if ".anthropic." in c or c.startswith("anthropic."):
            base = c.split("anthropic.", 1)[1]
            out += [base, base.split("-v1:")[0].split("-v2:")[0]]
    return out


# What may follow a table name in a snapshot id: dates, "latest", "-001", Bedrock versions.
_SNAPSHOT_SUFFIX = re.compile(
    r"^(?:[-@](?:\d{8}|\d{4}-\d{2}-\d{2}|latest|\d{3})|-v\d+(?::\d+)?|:\d+)*$"
)


def price_for(model: str) -> Price:
    """The price row for ``model``: exact name or alias first, then the longest table name
    that the model id starts with (so dated snapshots such as ``gpt-4o-2024-08-06`` find
    ``gpt-4o``). Raises ``PricingError`` naming the closest known models when none fits."""
    return _price_for(model)


@lru_cache(maxsize=4096)
def _price_for(model: str) -> Price:
    table = {**_load_bundled(), **_USER}
    unpriced = {k: v for k, v in _UNPRICED.items() if k not in _USER}
    found = _lookup(model, table, _ALIASES, unpriced)
    if found is not None:
        return found
    cands = _candidates(model)
    close = difflib.get_close_matches(cands[-1], list(table), n=3, cutoff=0.5)
    hint = f" (closest: {', '.join(close)})" if close else ""
    raise PricingError(
        f"no price known for model {model!r}{hint}; pass "
        "price=promptcache.Price(input=..., output=...) or load a TOML file"
    )


def _raise_unpriced(model: str, reason: str) -> None:
    raise PricingError(
        f"no sourced price for model {model!r} ({reason}); pass "
        "price=promptcache.Price(input=..., output=...) or load a TOML file"
    )


def _lookup(
    model: str, table: dict[str, Price], aliases: Mapping[str, str], unpriced: Mapping[str, str]
) -> Price | None:
    """The row for ``model`` in ``table`` (exact name or alias, else the longest row name
    it is a dated snapshot of), None when none fits; raises ``PricingError`` for a model
    declared in ``unpriced`` (never priced through another row's prefix)."""
    cands = _candidates(model)
    for c in cands:
        if c in table:
            return table[c]
        if c in aliases and aliases[c] in table:
            return table[aliases[c]]
    for c in cands:
        if c in unpriced:
            _raise_unpriced(model, unpriced[c])
    best, best_unpriced = None, None
    for c in cands:
        for name in table:
            if (
                c.startswith(name)
                and _SNAPSHOT_SUFFIX.match(c[len(name) :])
                and (best is None or len(name) > len(best))
            ):
                best = name
        for name in unpriced:
            if (
                c.startswith(name)
                and _SNAPSHOT_SUFFIX.match(c[len(name) :])
                and (best_unpriced is None or len(name) > len(best_unpriced))
            ):
                best_unpriced = name
    if best_unpriced is not None and (best is None or len(best_unpriced) > len(best)):
        _raise_unpriced(model, unpriced[best_unpriced])
    if best is not None:
        return table[best]
    return None
