"""Fakes and fault injection that ship with the package, for tests and demos."""
