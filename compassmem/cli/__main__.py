"""``python -m compassmem.cli``: the same as the ``compassmem`` command."""

import sys

from compassmem.cli.main import main

sys.exit(main())
