"""Punctual's three Lambda handlers; the code they run is :mod:`punctual.core`."""
