"""The README, the docs and the examples name current models (issue 17): none that the
installed anthropic SDK warns about on every call, none that openai's ``ChatModel`` lists as
deprecated in the pages a new user copies from, and every hosted model they call has a price.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from promptcache.errors import PricingError
from promptcache.ledger import pricing

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"local", "SmolLM2-135M-Instruct"}
# model="...", "model": "...", to_openai("..."), to_anthropic("..."), explain("..."),
# default="..." of an example's --price-model
CALL = re.compile(
    r"""(?:\bmodel\s*=\s*|"model"\s*:\s*|\.to_(?:openai|anthropic|bedrock|gemini)\(\s*|"""
    r"""\.explain\(\s*|--price-model",\s*default=)["']([^"']+)["']"""
)


def anthropic_deprecated() -> set[str]:
    from anthropic._data import DEPRECATED_MODELS

    return set(DEPRECATED_MODELS)


def openai_deprecated() -> set[str]:
    """Every id in the "Deprecated values" docstring of openai's ChatModel."""
    import openai.types.shared.chat_model as cm

    text = Path(inspect.getfile(cm)).read_text()
    doc = text[text.index("Deprecated values:") :]
    return set(re.findall(r'"([^"]+)"', doc))


def _files(*globs: str) -> list[Path]:
    return sorted(p for g in globs for p in ROOT.glob(g))


def _named(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in CALL.finditer(text)]


def test_deprecation_lists_are_read():
    # The lists change with each SDK release (anthropic 2.14 deprecates claude-sonnet-4-5,
    # 2.15 no longer lists it), so this checks that they are read, not what they hold today.
    anthropic_ids, openai_ids = anthropic_deprecated(), openai_deprecated()
    assert anthropic_ids and all(m.startswith("claude-") for m in anthropic_ids)
    assert openai_ids and all(re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", m) for m in openai_ids)
    assert "gpt-5.4" not in openai_ids  # the model the docs and the demo price


@pytest.mark.parametrize(
    "globs, deprecated",
    [
        (("README.md", "docs/sdk.md", "docs/index.md", "examples/*.py"), "both"),
        (("docs/rules/*.md", "docs/DESIGN.md"), "anthropic"),
    ],
)
def test_docs_name_current_priced_models(globs, deprecated):
    bad = []
    dep = anthropic_deprecated() | (openai_deprecated() if deprecated == "both" else set())
    for path in _files(*globs):
        for line, model in _named(path):
            where = f"{path.relative_to(ROOT)}:{line} {model}"
            if model in LOCAL:
                continue
            if model in dep:
                bad.append(f"{where}: deprecated")
                continue
            try:
                pricing.price_for(model)
            except PricingError:
                bad.append(f"{where}: no price")
    assert not bad, bad


def test_explain_default_model_is_current():
    from promptcache.compose.build import Prompt

    default = inspect.signature(Prompt.explain).parameters["model"].default
    assert default not in anthropic_deprecated() | openai_deprecated()
    pricing.price_for(default)


def test_demo_prices_at_a_current_model():
    from promptcache.integrations.demo import DEFAULT_PRICE_MODEL

    assert DEFAULT_PRICE_MODEL not in anthropic_deprecated() | openai_deprecated()
    pricing.price_for(DEFAULT_PRICE_MODEL)
