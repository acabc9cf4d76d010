"""``python -m promptcache`` runs the command line (see :mod:`promptcache.cli`)."""

from promptcache.cli import main

raise SystemExit(main())
