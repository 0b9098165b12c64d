"""The log levels: Python logging's names and numbers, one convention ("WARNING", never "WARN").

Their own module so that both the settings (``Settings.log_level``, config.py) and the log writer
(observability.py, which takes the settings) can import them.
"""

from __future__ import annotations

from typing import Literal

Level = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
LEVELS: dict[str, int] = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}
DEFAULT_LEVEL: Level = "INFO"


def check_level(level: str) -> str:
    """``level`` if it is one of :data:`LEVELS`, else ValueError naming them."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    return level
