#!/usr/bin/env bash
# Services the test suite uses beyond Python packages (installed from Debian's packages).
set -uo pipefail
exit 0
