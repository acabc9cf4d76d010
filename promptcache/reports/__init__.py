"""Reports over the ledger: ``promptcache report`` as text, JSON, CSV and HTML.

Owns the ``report`` command (:mod:`~.report`; ``--calls``, one line per call, and the
calls-without-usage note in :mod:`~.calls`), the HTML page (:mod:`~.html`), the "misses by
cause" section (:mod:`~.misses`), export to CSV/JSON lines (:mod:`~.export`) and re-pricing a
ledger at other prices (:mod:`~.reprice`). Reads the ledger only through
:class:`~promptcache.ledger.Tracker`; may import ``promptcache.ledger``, ``promptcache.misses``,
``promptcache.providers`` and the top-level modules; never the simulator or the integrations.
"""
