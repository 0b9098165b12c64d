"""Editor: the Lambda for the table's stream (the Python client is :mod:`punctual.client`)."""
