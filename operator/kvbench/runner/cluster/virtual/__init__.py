"""The virtual back end: workers and load in one discrete-event simulation."""
