"""``python -m linters PATH...``: same as ``promptcache lint PATH...``."""

from linters.cli import main

raise SystemExit(main())
