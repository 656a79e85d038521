from __future__ import annotations

import sys

from scheduler.cli import main

sys.exit(main())
