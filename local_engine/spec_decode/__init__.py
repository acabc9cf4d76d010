"""Speculative decoding: drafters (prompt lookup, a draft model) propose K tokens, the target
verifies them in one forward pass, and the rejection sampler keeps the target's distribution."""
