"""The kopf operator: handlers (`handlers.py`), the reconciling logic per experiment
(`experiments.py`) and what a user reads on the resource (`status.py`)."""
