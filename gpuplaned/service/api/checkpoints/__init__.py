"""Checkpoints for the API: the best of an experiment, a listing's details, verification."""
