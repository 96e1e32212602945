"""``python -m services.cli`` runs the ``governor`` command."""

import sys

from services.cli.main import main

sys.exit(main())
