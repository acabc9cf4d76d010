"""Cache simulation: replay requests under a provider's cache rules without calling it.

Owns the emulated provider caches — prefix matching, breakpoints, TTLs, eviction, the minimum
cacheable lengths of ``promptcache.limits`` (:mod:`~.emulation`, also used by the local engine's
server to answer with provider-shaped usage) — the ``promptcache simulate`` command and its trace
replay (:mod:`~.simulate`) and replay of a recorded ledger (:mod:`~.from_ledger`). May import
``promptcache.compose``, ``promptcache.ledger``, ``promptcache.providers``,
``promptcache.prompt`` and the top-level modules; never the reports or the integrations.
"""
