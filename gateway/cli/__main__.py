"""`python -m gateway.cli` runs `zonegate`."""
import sys

from gateway.cli.main import main

sys.exit(main())
