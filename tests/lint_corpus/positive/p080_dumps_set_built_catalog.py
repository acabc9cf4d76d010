"""Prices keyed by a set of in-stock names: the dict's key order is the set's, so equal
stock serialises in a different order in another process (issue 28: reported)."""
import json

import anthropic

PRICES = {"tea": 3, "coffee": 4, "cocoa": 5}


def recommend(in_stock: list[str], wish: str):
    catalog = {name: PRICES[name] for name in set(in_stock)}
    text = json.dumps(catalog)  # expect: PC002
    return anthropic.Anthropic().messages.create(
        model="claude-sonnet-4-5",
        system=f"Recommend from this catalog:\n{text}",
        messages=[{"role": "user", "content": wish}],
    )
