"""Print the crash matrix: ``python -m tests.reliability.matrix [poller|consumer|editor ...]``."""

from __future__ import annotations

import tests.conftest  # noqa: F401  (moto-safe AWS environment)
from tests.reliability.crashes import main

if __name__ == "__main__":
    main()
