"""Composing and checking requests: the work an application does before it sends one.

Owns ``promptcache.build(...)`` and the :class:`~promptcache.compose.build.Prompt` it returns
(:mod:`~promptcache.compose.build`), the explanation of a prompt's cache plan
(:mod:`~promptcache.compose.explain`), append-only histories
(:mod:`~promptcache.compose.conversation`), ``promptcache.check(payload, provider)`` for a request
built elsewhere (:mod:`~promptcache.compose.check`) and prefix-drift watching
(:mod:`~promptcache.compose.monitor`). May import ``promptcache.prompt``, ``promptcache.providers``
and ``promptcache.misses`` (the digest chain a check compares against); never the ledger, the
reports, the simulator or the integrations.
"""
