"""Miss attribution: why a request read less from the cache than it could have.

Owns the digest chain of a request (a hash per cacheable segment, :mod:`~.digest_chain`), locating
the first JSON path where two requests differ (:mod:`~.locate`), the cause of a miss from two
chains, the usage and the provider's rules (:mod:`~.cause`, with the closed list ``CAUSES``), and
the attributor that picks a request's predecessor and scores it (:mod:`~.attribution`). Pure
functions over requests and usage: may import ``promptcache.providers`` (usage records),
``promptcache.prompt`` and the top-level ``limits``; never the ledger (which stores what this
package computes) nor anything above it.
"""
