"""The Quart-Trio app: routes, error mapping and auth. No business logic."""
